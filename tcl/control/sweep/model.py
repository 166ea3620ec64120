"""An entry's states and the one table of legal moves between them.

queued → claimed → running → done | failed, and cancelled from any live state. A claimed or
running entry goes back to queued when its lease expires (its scheduler died), when nothing
could place it (no capacity: not counted as a failure), or when its run waits for a retry.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class EntryState(enum.StrEnum):
    QUEUED = "queued"  # waits for a scheduler (from ``not_before`` on)
    CLAIMED = "claimed"  # a scheduler holds its lease and is placing it
    RUNNING = "running"  # its run was placed; the lease holder follows it
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in _FINAL


_FINAL = frozenset({EntryState.DONE, EntryState.FAILED, EntryState.CANCELLED})
_HELD = frozenset({EntryState.CLAIMED, EntryState.RUNNING})

# target -> states it may be entered from. ``requeue`` (the user's) takes a final entry back to
# queued: that is the one way out of a final state, and only through :meth:`SweepQueue.requeue`.
TRANSITIONS: dict[EntryState, frozenset[EntryState]] = {
    EntryState.QUEUED: _HELD,
    EntryState.CLAIMED: frozenset({EntryState.QUEUED}),
    EntryState.RUNNING: frozenset({EntryState.CLAIMED}),
    EntryState.DONE: _HELD,
    EntryState.FAILED: _HELD,
    EntryState.CANCELLED: frozenset({EntryState.QUEUED, *_HELD}),
}
REQUEUE_FROM = frozenset({EntryState.FAILED, EntryState.CANCELLED, EntryState.DONE})


def allowed(current: EntryState, target: EntryState) -> bool:
    return current in TRANSITIONS[target]


@dataclass(frozen=True)
class Entry:
    id: int
    matrix: str
    job_id: str
    fields: dict[str, Any]
    state: EntryState
    priority: int
    not_before: float
    lease_owner: str | None
    lease_expires: float | None
    claims: int  # how many times a scheduler claimed it
    run_id: str | None  # its tcl run (the same across retries)
    last_error: str
    created_at: float
    started_at: float | None
    ended_at: float | None
    scheduler: str = ""  # the name of the scheduler that claimed it last ('' never claimed)


@dataclass(frozen=True)
class Matrix:
    name: str
    spec: dict[str, Any]  # what each entry runs and where (see tcl.control.sweep.spec)
    created_at: float


def error_line(e: BaseException) -> str:
    """What an entry keeps of an error (its ``last_error``, a run's message): its first line."""
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:2048]
