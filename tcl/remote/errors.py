"""One exception tree for `@tcl.remote` (stdlib only: the worker may import it too)."""

from __future__ import annotations


class RemoteError(Exception):
    """Base of every error raised by tcl.remote itself (not by the user's function)."""


class UnpicklableError(RemoteError, TypeError):
    """Something the call needs cannot be pickled; nothing was shipped.

    `failures` maps a description ("global 'lock'", "argument 0") to the error message."""

    def __init__(self, failures: dict[str, str]) -> None:
        self.failures = dict(failures)
        lines = [f"{what} {msg}" for what, msg in self.failures.items()]
        super().__init__(
            "cannot ship the call, nothing was sent:\n  " + "\n  ".join(lines)
            if lines
            else "cannot ship the call, nothing was sent"
        )


class VersionMismatch(RemoteError):
    """The remote Python (major.minor) or cloudpickle differs from the local one."""


class WorkerRefused(RemoteError):
    """The worker refused the connection (wrong token)."""


class WorkerUnverified(WorkerRefused):
    """The other end could not prove it holds the session key (the key is wrong, or what
    listens is not the session's worker): nothing was sent to it, nothing from it unpickled."""


class ProtocolError(RemoteError):
    """The peer sent something the protocol does not allow, or the connection broke."""


class BlobsMissing(RemoteError):
    """The worker lacks an array the call refers to by digest (dropped, or never sent to this
    worker): the client sends the call again with its arrays."""


class RemoteCallFailed(RemoteError):
    """The remote function raised an exception that could not be rebuilt locally."""


class RemoteTraceback(Exception):
    """Carries the remote traceback text; set as `__cause__` of a re-raised remote exception so
    the printed traceback shows the remote file and line (as concurrent.futures does)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f'\n"""\n{self.text.rstrip()}\n"""'
