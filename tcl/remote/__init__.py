"""Run a notebook's function on a remote accelerator and write its globals back: `@tcl.remote`.

Submodules are imported on demand (`import tcl` stays light, and the remote worker imports only
`wire` and `payload`, which need nothing beyond the stdlib and cloudpickle)."""

import sys
import types
from typing import Any


class _RemoteModule(types.ModuleType):
    """``tcl.remote`` is this package and the decorator at once: ``@tcl.remote`` and
    ``@tcl.remote(chip="h100")`` work whichever of ``tcl.remote``'s submodules was imported
    first (a plain function attribute on ``tcl`` would be replaced by the package as soon as
    any submodule is imported)."""

    def __call__(self, fn: Any = None, /, **placement: Any) -> Any:
        from tcl.remote.decorator import remote

        return remote(fn, **placement)


sys.modules[__name__].__class__ = _RemoteModule
