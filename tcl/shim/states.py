"""Task states: one transition table (target <- sources), consulted by the store's single guarded
writer, ``TaskStore.update``, through ``allowed(current, target)``.

::

    pending ─► preparing ─► pulling ─► creating ─► running ─► terminated
       │           │  └──────────────────►│           │ ▲          ▲ │
       └───────────┴───────────┴──────────┴───────────┘ └──┐       └─┘
                    (any state may terminate)      running→running   terminated→terminated

``preparing → creating`` skips the pull when the image is already present (or the executor
pulls nothing). Three self-loops are deliberate: ``pulling → pulling`` carries pull progress,
``running → running`` records facts learnt after start (ports, adoption after a shim restart) and
``terminated → terminated`` makes terminate repeatable (the store keeps the first reason).
"""

from __future__ import annotations

from tcl.shim.api import TaskStatus

S = TaskStatus

# target -> the states it may be entered from. Self-loops are commented with their reason.
TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    S.PENDING: frozenset(),
    S.PREPARING: frozenset({S.PENDING}),
    # pulling -> pulling: pull progress is recorded as it arrives
    S.PULLING: frozenset({S.PREPARING, S.PULLING}),
    S.CREATING: frozenset({S.PREPARING, S.PULLING}),  # from preparing: nothing to pull
    # running -> running: facts learnt after start (ports, adoption after a shim restart)
    S.RUNNING: frozenset({S.CREATING, S.RUNNING}),
    # any state may terminate; terminated -> terminated: terminate is repeatable (the store
    # keeps the first reason)
    S.TERMINATED: frozenset(TaskStatus),
}


def allowed(current: TaskStatus, target: TaskStatus) -> bool:
    return current in TRANSITIONS[target]


def is_active(status: TaskStatus) -> bool:
    """True while the task holds its accelerators."""
    return status is not TaskStatus.TERMINATED
