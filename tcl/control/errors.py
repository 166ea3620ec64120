"""The control plane's exception tree.

::

    TclError                      every expected failure; the CLI prints it as one line
    ├── ConfigError               bad config file: names the key path and the line
    ├── ShippingError             the code snapshot cannot be made
    │   └── CodeTooLargeError     over the size limit: names the limit and the largest files
    ├── UnknownHostError          a run's host is not in the config and it kept no record
    ├── StoreError                the state store refuses (unknown run, schema, ...)
    │   └── RunNotFoundError
    ├── SshError                  translated from asyncssh / OSError at the pool
    │   ├── SshConnectError       cannot connect (refused, timeout, DNS): retried with backoff
    │   ├── SshAuthError          key refused / host key mismatch: never retried
    │   └── SshCommandError       a remote command exited non-zero
    ├── AgentError                a shim or runner answered with an error (translated from httpx)
    │   ├── AgentUnreachableError the connection to it failed or dropped: re-resolve and retry
    │   ├── TaskNotFoundError     the shim holds no such task (never made there, or removed)
    │   ├── NoCapacityError       the shim's 409 no_capacity
    │   ├── DaemonError           the local `tcl serve` daemon cannot be started or reached
    │   └── SyncConflictError     the runner refused a code sync: those paths changed under it
    ├── NoPlacementError          the solver found nothing: carries what each host offers
    ├── PlacementAborted          the run was stopped while it was placed (its task undone)
    ├── SubmitCancelled           Ctrl-C during a submit, once what it started is cleaned up
    ├── ConfirmationNeededError   the plan creates something billed: the user must confirm
    ├── SyncError                 `tcl sync` cannot build a patch (too big, state file bad)
    └── HostSetupError            `tcl host setup` failed (names the step)

    StateConflict                 (outside the tree) a state writer refused a move its table
                                  does not allow: a bug or a lost race, never the user's

Foreign exceptions (asyncssh, httpx, OSError, yaml, pydantic) are translated where they are
called, so callers and the CLI only ever see this tree.
"""

from __future__ import annotations


class TclError(Exception):
    """Every failure a user can cause or fix; printed as one line by the CLI."""

    exit_code = 1


class ConfigError(TclError):
    """The config file is unreadable or invalid (the message names key path and line)."""

    exit_code = 2


class ShippingError(TclError):
    """The code snapshot cannot be made."""


class CodeTooLargeError(ShippingError):
    """The snapshot is over the size limit."""


class UnknownHostError(TclError):
    """A run's host is not in the config, and its attempt kept no placement record (a run
    placed before records were kept): nothing says how to reach it."""


class StoreError(TclError):
    """The state store refused an operation."""


class RunNotFoundError(StoreError):
    """No run with that id (or unique id prefix / name)."""


class StateConflict(Exception):
    """A run or attempt writer was asked for a move ``tcl.control.states`` does not allow.

    Not a :class:`TclError` on purpose: no ``except TclError`` (a user-facing failure)
    swallows it; it reaches the loop that owns the run, which logs it as a bug and retries."""


class SshError(TclError):
    """An SSH operation failed (translated from asyncssh/OSError)."""


class SshConnectError(SshError):
    """Cannot reach the host: refused, timed out, unresolvable, connection lost."""


class SshAuthError(SshError):
    """The host refused our key, or its host key is unknown/changed."""


class SshCommandError(SshError):
    """A remote command exited non-zero."""

    def __init__(self, message: str, exit_code: int | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.remote_exit_code = exit_code
        self.stderr = stderr


class AgentError(TclError):
    """A shim or runner answered with an error or could not be reached."""


class AgentUnreachableError(AgentError):
    """The agent could not be reached (a dropped tunnel, a dead process)."""


class TaskNotFoundError(AgentError):
    """The shim answered that it holds no such task: never made there (its placer died
    before asking), or removed once it ended and was released."""


class NoCapacityError(AgentError):
    """The shim refused the task because the accelerators are not free."""


class DaemonError(AgentError):
    """The local ``tcl serve`` daemon could not be started, or its stream broke."""


class NoPlacementError(TclError):
    """Nothing fits the request; ``offers`` lists what each host offers now."""

    def __init__(self, message: str, offers: list[tuple[str, str]]) -> None:
        lines = [message, *(f"  {host}: {offer}" for host, offer in offers)]
        super().__init__("\n".join(lines))
        self.offers = offers


class PlacementAborted(TclError):
    """The run was stopped (``tcl stop``, a matrix cancel) while it was being placed: the task
    its placement launched was stopped and freed."""


class SubmitCancelled(TclError):
    """A submit was interrupted (Ctrl-C); its task and partial uploads are already removed.
    The message is the one line to print, e.g. ``cancelled; nothing left on gpu1``."""

    exit_code = 130


class ConfirmationNeededError(TclError):
    """The chosen plan creates something the user pays for (a cloud TPU node); the message is
    what to confirm. ``tcl submit`` asks, then submits again with ``--yes``."""

    exit_code = 3


class HostSetupError(TclError):
    """`tcl host setup` failed at a named step."""


class SweepError(TclError):
    """A matrix or its entries: not found, or bad input (the message names the entries)."""

    exit_code = 2


class SyncError(TclError):
    """`tcl sync` cannot build or record a patch: over the size cap (names the largest
    files), a file changed while it was read, or a damaged state file (names it)."""


class SyncConflictError(AgentError):
    """``tcl sync``: the remote tree changed under the patch (nothing was applied)."""
