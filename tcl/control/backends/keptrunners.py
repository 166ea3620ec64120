"""The runner clients of a backend's live tasks, kept from one pull of their events to the next.

Asked anew for each pull, a client cost a call to the shim (the runner's port and token) and a
new connection to the runner (through SSH: a new channel) before the long-poll even began; a
line printed meanwhile waited for all of it. Kept, the next long-poll goes out on the open
connection as soon as the last one answered. A client is dropped when its runner stops answering
(the next pull asks the shim again: the runner may be gone, or another one holds its port), when
its task ended and everything it said is kept, and when its host's connection is reset; it is
closed once no call is in flight on it (another caller's long-poll is not cut short).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from tcl.control.transport.agents import RunnerApi


@dataclass
class _Kept:
    runner: RunnerApi
    in_flight: int = 0
    dropped: bool = False


class KeptRunners:
    def __init__(self) -> None:
        self._kept: dict[str, _Kept] = {}

    def get(self, task_id: str) -> RunnerApi | None:
        kept = self._kept.get(task_id)
        return kept.runner if kept is not None else None

    def task_ids(self) -> list[str]:
        return list(self._kept)

    def keep(self, task_id: str, runner: RunnerApi) -> RunnerApi | None:
        """Keep ``runner`` as the task's client; if another caller kept one meanwhile, that
        one stays and ``runner`` is returned for the caller to close."""
        if task_id in self._kept:
            return runner
        self._kept[task_id] = _Kept(runner)
        return None

    @asynccontextmanager
    async def using(self, task_id: str) -> AsyncIterator[RunnerApi]:
        """The kept client of ``task_id`` (kept with :meth:`keep`, with no await between),
        counted as in use."""
        kept = self._kept[task_id]
        kept.in_flight += 1
        try:
            yield kept.runner
        finally:
            kept.in_flight -= 1
            if kept.dropped and kept.in_flight == 0:
                await kept.runner.aclose()

    async def drop(self, task_id: str) -> None:
        """Forget the task's client; it is closed once no call is in flight on it."""
        kept = self._kept.pop(task_id, None)
        if kept is None:
            return
        kept.dropped = True
        if kept.in_flight == 0:
            await kept.runner.aclose()

    async def aclose(self) -> None:
        for task_id in self.task_ids():
            await self.drop(task_id)
