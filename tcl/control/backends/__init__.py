"""Backends: how control reaches a host's shim and a task's runner (local, ssh)."""

from tcl.control.backends.base import Backend, SshEndpoint
from tcl.control.backends.local import LocalBackend
from tcl.control.backends.ssh import SshBackend

__all__ = ["Backend", "LocalBackend", "SshBackend", "SshEndpoint"]
