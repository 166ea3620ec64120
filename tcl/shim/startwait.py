"""Waiting for a task to start: ``GET /api/tasks/{id}?wait_s=N`` answers once the task runs
(its runner's port is known) or has ended, else after ``N`` seconds with where it stands.

A launch used to ask every 20 ms until its task ran: on average half an interval lost on the way
of every submit and every sweep entry (bench/sweep_gap.py), and a request for each interval. The
service wakes the waiters of a task when it writes the task's state (:meth:`StartWaits.notify`);
a waiter also looks again every :data:`RECHECK_S`, so a change written another way (a pull's
progress, from its thread) is never waited on for long.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from tcl.shim.api import TaskInfo, TaskStatus

RECHECK_S = 0.25


def started(info: TaskInfo) -> bool:
    """Whether a start waiter is answered: running with its runner's port, or ended."""
    if info.status is TaskStatus.RUNNING:
        return info.ports.runner is not None
    return info.status is TaskStatus.TERMINATED


class StartWaits:
    """The tasks waited on, each with the event its next state write sets (one loop's)."""

    def __init__(self) -> None:
        self._changed: dict[str, asyncio.Event] = {}

    def notify(self, task_id: str) -> None:
        """The task's state was written: its waiters look again."""
        ev = self._changed.pop(task_id, None)
        if ev is not None:
            ev.set()

    async def wait(self, get: Callable[[str], TaskInfo], task_id: str, wait_s: float) -> TaskInfo:
        """``get(task_id)`` once the task started or ended, or after ``wait_s`` (raises what
        ``get`` raises: an unknown task at once)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        while True:
            info = get(task_id)  # then the event, with no await between: no write is missed
            left = deadline - loop.time()
            if started(info) or left <= 0:
                return info
            ev = self._changed.setdefault(task_id, asyncio.Event())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ev.wait(), min(left, RECHECK_S))
