"""The store's records: a run and an attempt as the rest of tcl sees them, read from rows."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from tcl.control.errors import StoreError
from tcl.control.runrequest import RunRequest
from tcl.control.states import AttemptCause, RunState
from tcl.control.store.tables import AttemptRow, RunRow

IN_CHUNK = 500  # ids per IN (...) list: well under every backend's bound-parameter limit


@dataclass(frozen=True)
class Run:
    id: str
    name: str
    state: RunState
    host: str | None
    backend: str | None
    request: RunRequest
    code_sha256: str | None
    exit_code: int | None
    message: str
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class Placement:
    """Where a run was placed: its host, the backend kind and the code it runs."""

    host: str
    backend: str
    code_sha256: str | None


@dataclass(frozen=True)
class Attempt:
    run_id: str
    attempt: int
    host: str
    backend: str
    handle: dict[str, Any]  # the backend's typed handle as JSON (``Control.handle`` reads it)
    state: RunState
    log_cursor: int
    created_at: float = 0.0
    cause: AttemptCause | None = None  # why it ended (None until then, or recorded before v2)
    started_at: float | None = None  # its job started running (None: not yet, or before v4)
    ended_at: float | None = None  # it ended (None: not yet, or before v4)
    pid: int | None = None  # the job's pid on its first node, as its runner reported it

    @property
    def duration_s(self) -> float | None:
        """How long its job ran: until it ended, or until now while it runs."""
        if self.started_at is None:
            return None
        return max(0.0, (self.ended_at or time.time()) - self.started_at)


def request_of(row: RunRow) -> RunRequest:
    """The row's request, parsed (missing keys take their defaults, unknown ones are ignored)."""
    try:
        return RunRequest.model_validate(row.request)
    except ValidationError as e:  # a value of the wrong type: written by hand, or a future tcl
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise StoreError(
            f"run {row.id}: its stored request is unreadable ({where}: {first['msg']})"
        ) from None


def run_of(row: RunRow) -> Run:
    return Run(
        row.id,
        row.name,
        RunState(row.state),
        row.host,
        row.backend,
        request_of(row),
        row.code_sha256,
        row.exit_code,
        row.message,
        row.created_at,
        row.updated_at,
    )


def attempt_of(row: AttemptRow) -> Attempt:
    return Attempt(
        row.run_id,
        row.attempt,
        row.host,
        row.backend,
        dict(row.handle),
        RunState(row.state),
        row.log_cursor,
        row.created_at,
        AttemptCause(row.cause) if row.cause else None,
        row.started_at,
        row.ended_at,
        row.pid,
    )
