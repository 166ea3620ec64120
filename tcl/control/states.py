"""Run states and the one table of legal moves between them."""

from __future__ import annotations

import enum


class RunState(enum.StrEnum):
    """pending → [queued →] provisioning → running → succeeded | failed | terminated.

    A batch scheduler (SLURM) may put a running run back in the queue (preemption, requeue):
    running → queued, under a new attempt. An attempt that ended when the run is to be placed
    again (its retry policy, a lost node, an undone placement with nothing free): → waiting_retry
    until its backoff passed and something takes it (→ queued | provisioning)."""

    PENDING = "pending"  # recorded, not yet placed
    QUEUED = "queued"  # placed in a scheduler's queue (SLURM), waiting for nodes
    PROVISIONING = "provisioning"  # placed: task created, code going up, job not started
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TERMINATED = "terminated"  # stopped by the user or the host
    # its last attempt ended; it waits to be placed again (``tcl.control.retries``: when, why)
    WAITING_RETRY = "waiting_retry"

    @property
    def is_final(self) -> bool:
        return self in _FINAL


_FINAL = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.TERMINATED})
_LIVE = frozenset(
    {
        RunState.PENDING,
        RunState.QUEUED,
        RunState.PROVISIONING,
        RunState.RUNNING,
        RunState.WAITING_RETRY,
    }
)

# target -> states it may be entered from (one direction: nothing leaves a final state).
# Self-loops: queued (a requeue seen again, the queue's reason updated), running (each poll of a
# live job), waiting_retry (a placement again that found nothing: it waits again, a new reason).
TRANSITIONS: dict[RunState, frozenset[RunState]] = {
    RunState.PENDING: frozenset(),
    RunState.QUEUED: _LIVE,  # a requeue takes a running run back
    RunState.PROVISIONING: frozenset({RunState.PENDING, RunState.QUEUED, RunState.WAITING_RETRY}),
    RunState.RUNNING: frozenset({RunState.QUEUED, RunState.PROVISIONING, RunState.RUNNING}),
    RunState.WAITING_RETRY: frozenset(
        {RunState.QUEUED, RunState.PROVISIONING, RunState.RUNNING, RunState.WAITING_RETRY}
    ),
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


class AttemptCause(enum.StrEnum):
    """Why an attempt ended: recorded with its final state, shown with the run's attempts.

    Only ``exit`` is the job's own verdict; the others are what happened to it (a retry policy
    counts a failed ``exit`` as a failure, never the rest)."""

    EXIT = "exit"  # the job exited (succeeded or failed: its exit code says)
    PREEMPTED = "preempted"  # the host or its scheduler took it back (preemption, requeue)
    NODE_LOST = "node_lost"  # its host lost it (a preempted cloud node, a vanished pod)
    PLACEMENT_FAILED = "placement_failed"  # its placement did not finish (undone)
    STOPPED = "stopped"  # stopped: by the user (`tcl stop`, `tcl matrix cancel`), its time limit
    # its host did not answer for a whole budget: how the job went is unknown, not its verdict
    INFRA = "infra"
    # its runner found it hung (no step past its limit: tcl.runner.hangwatch), dumped its
    # stacks and ended it; a retry policy counts it as a failure
    HUNG = "hung"

    @classmethod
    def of_end(cls, state: RunState, preempted: bool = False) -> AttemptCause:
        """What its host's final state says: a job stopped there (``terminated``: a stop, its
        time limit) or one that exited; a preemption notice whatever its state."""
        if preempted:
            return cls.PREEMPTED
        return cls.STOPPED if state is RunState.TERMINATED else cls.EXIT
