"""Task states: one transition table, consulted by the store's single guarded writer.

::

    pending ─► preparing ─► pulling ─► creating ─► running ─► terminated
       │           │  └──────────────────►│           │ ▲          ▲ │
       └───────────┴───────────┴──────────┴───────────┘ └──┐       └─┘
                    (any state may terminate)      running→running   terminated→terminated

``preparing → creating`` skips the pull when the image is already present (or the executor
pulls nothing). Two self-loops are deliberate: ``running → running`` records facts learnt after
start (ports, adoption after a shim restart) and ``terminated → terminated`` makes terminate
repeatable (the store keeps the first reason). ``pulling → pulling`` carries pull progress.
"""

from __future__ import annotations

from tcl.shim.api import TaskStatus

S = TaskStatus

TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    S.PENDING: frozenset({S.PREPARING, S.TERMINATED}),
    S.PREPARING: frozenset({S.PULLING, S.CREATING, S.TERMINATED}),
    S.PULLING: frozenset({S.PULLING, S.CREATING, S.TERMINATED}),
    S.CREATING: frozenset({S.RUNNING, S.TERMINATED}),
    S.RUNNING: frozenset({S.RUNNING, S.TERMINATED}),
    S.TERMINATED: frozenset({S.TERMINATED}),
}


def can_transition(current: TaskStatus, target: TaskStatus) -> bool:
    return target in TRANSITIONS[current]


def is_active(status: TaskStatus) -> bool:
    """True while the task holds its accelerators."""
    return status is not TaskStatus.TERMINATED
