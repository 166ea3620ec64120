"""A shim host's tasks are named after the run and attempt they are for:
``<run id>-<attempt>``, or ``<run id>-<attempt>-n<node>`` for each node of a multi-node launch.
The names are made here (a launch) and read back here (the orphan sweep,
:mod:`tcl.control.lifecycle.orphans`)."""

from __future__ import annotations

import re

from tcl.control.backends.base import HostTask
from tcl.shim.api import TaskInfo

_NAME = re.compile(r"^(?P<run>.+)-(?P<attempt>\d+)(?:-n\d+)?$")


def task_ids(run_id: str, attempt: int, nodes: int) -> list[str]:
    """The task of each node of attempt ``attempt`` of ``run_id``."""
    base = f"{run_id}-{attempt}"
    return [base] if nodes == 1 else [f"{base}-n{i}" for i in range(nodes)]


def host_task(host: str, info: TaskInfo, now: float) -> HostTask | None:
    """What ``info``'s name says it is for (None: not a name tcl gives)."""
    m = _NAME.match(info.id)
    if m is None:
        return None
    age_s = max(0.0, now - info.created_at)
    return HostTask(host, info.id, m["run"], int(m["attempt"]), age_s)
