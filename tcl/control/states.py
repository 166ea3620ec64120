"""Run states and the one table of legal moves between them."""

from __future__ import annotations

import enum


class RunState(enum.StrEnum):
    """pending → provisioning → running → succeeded | failed | terminated."""

    PENDING = "pending"  # recorded, not yet placed
    PROVISIONING = "provisioning"  # placed: task created, code going up, job not started
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TERMINATED = "terminated"  # stopped by the user or the host

    @property
    def is_final(self) -> bool:
        return self in _FINAL


_FINAL = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.TERMINATED})

# target -> states it may be entered from. Terminal states only loop onto themselves
# (a repeated stop or a late poll writes the same state again; the first outcome is kept).
TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.PENDING: frozenset(),
    RunState.PROVISIONING: frozenset({RunState.PENDING}),
    RunState.RUNNING: frozenset({RunState.PROVISIONING, RunState.RUNNING}),
    RunState.SUCCEEDED: frozenset({RunState.PROVISIONING, RunState.RUNNING, RunState.SUCCEEDED}),
    RunState.FAILED: frozenset(
        {RunState.PENDING, RunState.PROVISIONING, RunState.RUNNING, RunState.FAILED}
    ),
    RunState.TERMINATED: frozenset(
        {RunState.PENDING, RunState.PROVISIONING, RunState.RUNNING, RunState.TERMINATED}
    ),
}


def allowed(current: RunState, target: RunState) -> bool:
    return current in TRANSITIONS[target]
