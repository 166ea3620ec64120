"""Runners exiting in the background: a terminated task whose job had ended on its own got its
chips back at once (``TaskService.terminate``); its runner's exit (a quarter second for a
process, more for a container) and, when the task is removed meanwhile, the removal of its
workload and files follow here, off the caller's time."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

from tcl.shim.errors import ShimError
from tcl.shim.executors.base import Executor
from tcl.shim.store import Handle, TaskStore

log = logging.getLogger(__name__)


class ExitingRunners:
    def __init__(self) -> None:
        self._stopping: dict[str, asyncio.Task[None]] = {}  # task id -> its runner's stop
        self._removing: set[asyncio.Task[None]] = set()

    def __contains__(self, task_id: str) -> bool:
        return task_id in self._stopping

    def stop(self, executor: Executor, task_id: str, handle: Handle, timeout_s: float) -> None:
        async def stop_runner() -> None:
            try:
                await executor.stop(task_id, handle, timeout_s)
            except ShimError as e:
                log.warning("task %s: stopping its runner failed: %s", task_id, e.detail)
            finally:
                self._stopping.pop(task_id, None)

        self._stopping[task_id] = asyncio.create_task(stop_runner(), name=f"stop-{task_id}")

    def remove(
        self, executor: Executor, task_id: str, handle: Handle, store: TaskStore, trash: Path | None
    ) -> None:
        """Once the runner has exited: its workload removed, its moved-aside files deleted."""
        stopping = self._stopping.get(task_id)

        async def remove_after() -> None:
            if stopping is not None:
                with contextlib.suppress(Exception):
                    await asyncio.shield(stopping)
            try:
                await executor.remove(task_id, handle)
            except ShimError as e:
                log.warning("task %s: removing its workload failed: %s", task_id, e.detail)
            if trash is not None:
                await asyncio.to_thread(store.discard, trash)

        later = asyncio.create_task(remove_after(), name=f"remove-{task_id}")
        self._removing.add(later)
        later.add_done_callback(self._removing.discard)

    async def wait(self, timeout_s: float) -> None:
        pending = [*self._stopping.values(), *self._removing]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
