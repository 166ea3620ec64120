"""tcl: ship a repo to the best free accelerators you can reach and run a JAX job there."""

__version__ = "0.1.0"
# The distribution's name on PyPI (the plain name `tcl` belongs to an unrelated project); the
# import package and the commands stay `tcl`, `tcl-shim`, `tcl-runner`.
DISTRIBUTION = "tcl-submit"


def __getattr__(name: str) -> object:
    # `tcl.remote` (the decorator package) is imported on first use: `import tcl` stays light.
    if name == "remote":
        import importlib

        return importlib.import_module("tcl.remote")
    raise AttributeError(f"module 'tcl' has no attribute {name!r}")
