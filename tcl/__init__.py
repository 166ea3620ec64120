"""tcl: ship a repo to the best free accelerators you can reach and run a JAX job there."""

__version__ = "0.1.0"
