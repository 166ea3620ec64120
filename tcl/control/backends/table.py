"""The one table that picks a backend: config host ``type`` → implementation.

Values are import paths, resolved on first use (a CLI command imports only what it needs), or
classes (tests put fakes here: ``monkeypatch.setitem(BACKENDS, "local", FakeBackend)``). An
attempt records its backend's ``kind``, which is also a key of this table.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from tcl.control.errors import TclError

if TYPE_CHECKING:
    from tcl.control.backends.base import Backend, NodePlace
    from tcl.control.store import Attempt

BACKENDS: dict[str, str | type[Backend]] = {
    "local": "tcl.control.backends.local:LocalBackend",
    "ssh": "tcl.control.backends.ssh:SshBackend",
    "plain": "tcl.control.backends.ssh:SshBackend",
    "slurm": "tcl.control.backends.slurm:SlurmBackend",
    "tpu": "tcl.control.backends.tpu.backend:TpuBackend",
    "volcano": "tcl.control.backends.volcano.backend:VolcanoBackend",
}


def backend_class(host_type: str) -> type[Backend]:
    entry = BACKENDS.get(host_type)
    if entry is None:
        raise TclError(f"type {host_type} has no backend in this version")
    if isinstance(entry, str):
        module, _, name = entry.partition(":")
        try:
            cls: type[Backend] = getattr(importlib.import_module(module), name)
        except ModuleNotFoundError:
            raise TclError(f"type {host_type} has no backend in this version") from None
        return cls
    return entry


def attempt_places(att: Attempt) -> list[NodePlace]:
    """Where an attempt's nodes ran, read from its stored handle alone (no backend is made, no
    host asked); none for an attempt that named nothing yet, or one a newer tcl recorded."""
    if not att.handle:
        return []
    try:
        model = backend_class(att.backend).handle_model
        raw = {"kind": att.backend, "host": att.host, **att.handle}
        return model.model_validate(raw).places()
    except (TclError, ValueError):
        return []
