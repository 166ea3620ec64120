"""The runner's exception tree. ``app.py`` maps each class to an HTTP status once.

RunnerError
├── InvalidRequest          400  bad header or parameter
│   └── CodeHashMismatch    400  body sha256 differs from X-Code-Sha256 / the spec
├── Conflict                409  the request is legal, but not now
│   ├── SpecConflict        409  a second, different spec
│   ├── IllegalTransition   409  e.g. run before the code
│   └── SyncConflict        409  a sync patch's paths changed remotely (names them)
├── CodeNotCached           404  the host's code cache has no tree with that sha256
├── InvalidSpec             422  a spec that parses but cannot run (names the field)
├── UnsafeArchive           422  a tarball member escapes the working dir
├── PayloadTooLarge         413  body over the size limit
├── StorageError            500  the state dir cannot be written (disk full, permissions)
└── ExecutorError           500  the job could not be started
"""

from __future__ import annotations


class RunnerError(Exception):
    """Base of every error the runner raises on purpose; ``code`` is the wire ``error``."""

    code = "runner_error"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidRequest(RunnerError):
    code = "invalid_request"


class CodeHashMismatch(InvalidRequest):
    code = "code_hash_mismatch"


class Conflict(RunnerError):
    code = "conflict"


class SpecConflict(Conflict):
    code = "spec_conflict"


class IllegalTransition(Conflict):
    code = "illegal_state"


class SyncConflict(Conflict):
    """A sync patch's paths no longer hold what the client diffed against; ``paths`` lists
    them all (the message at most 20). Nothing was changed."""

    code = "sync_conflict"

    def __init__(self, paths: list[str]) -> None:
        shown = ", ".join(paths[:20])
        more = f" and {len(paths) - 20} more" if len(paths) > 20 else ""
        super().__init__(f"changed on the remote since the last sync: {shown}{more}")
        self.paths = paths


class CodeNotCached(RunnerError):
    code = "code_not_cached"


class UnsafeArchive(RunnerError):
    code = "unsafe_archive"


class PayloadTooLarge(RunnerError):
    code = "payload_too_large"


class StorageError(RunnerError):
    code = "storage_error"


class ExecutorError(RunnerError):
    code = "executor_error"


class InvalidSpec(RunnerError):
    """A spec that parses but cannot run (422, like a schema error); ``field`` names the key."""

    code = "invalid_spec"

    def __init__(self, field: str, detail: str) -> None:
        super().__init__(detail)
        self.field = field
