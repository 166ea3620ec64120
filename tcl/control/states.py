"""Run states and the one table of legal moves between them."""

from __future__ import annotations

import enum


class RunState(enum.StrEnum):
    """pending → [queued →] provisioning → running → succeeded | failed | terminated.

    A batch scheduler (SLURM) may put a running run back in the queue (preemption, requeue):
    running → queued, under a new attempt."""

    PENDING = "pending"  # recorded, not yet placed
    QUEUED = "queued"  # placed in a scheduler's queue (SLURM), waiting for nodes
    PROVISIONING = "provisioning"  # placed: task created, code going up, job not started
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TERMINATED = "terminated"  # stopped by the user or the host

    @property
    def is_final(self) -> bool:
        return self in _FINAL


_FINAL = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.TERMINATED})
_LIVE = frozenset({RunState.PENDING, RunState.QUEUED, RunState.PROVISIONING, RunState.RUNNING})

# target -> states it may be entered from (one direction: nothing leaves a final state).
TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.PENDING: frozenset(),
    RunState.QUEUED: _LIVE,  # a requeue takes a running run back
    RunState.PROVISIONING: frozenset({RunState.PENDING, RunState.QUEUED}),
    RunState.RUNNING: frozenset({RunState.QUEUED, RunState.PROVISIONING, RunState.RUNNING}),
    RunState.SUCCEEDED: frozenset({RunState.QUEUED, RunState.PROVISIONING, RunState.RUNNING}),
    RunState.FAILED: _LIVE,
    RunState.TERMINATED: _LIVE,
}


class Move(enum.Enum):
    APPLY = "apply"
    KEEP = "keep"  # a final state met again: the first outcome is kept (a late poll, a 2nd stop)
    ILLEGAL = "illegal"


def move(current: RunState, target: RunState) -> Move:
    if current.is_final and target.is_final:
        return Move.KEEP
    return Move.APPLY if current in TRANSITIONS[target] else Move.ILLEGAL


def allowed(current: RunState, target: RunState) -> bool:
    return move(current, target) is not Move.ILLEGAL
