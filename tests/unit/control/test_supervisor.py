"""The daemon's loops under supervision: a loop that dies is started again and its error shown;
the sweep scheduler survives a state store that stops answering for a while."""

from __future__ import annotations

import asyncio
from typing import Any

from tcl.control.daemon.supervisor import Supervisor
from tcl.control.errors import StoreError
from tcl.control.sweep.model import Entry
from tcl.control.sweep.scheduler import Scheduler, SchedulerSettings
from tests.polling import await_until


async def test_a_loop_that_dies_is_started_again_and_its_error_is_shown() -> None:
    stopping = asyncio.Event()
    sup = Supervisor(stopping, base_s=0.01, cap_s=0.05)
    starts = 0

    async def flaky(stop: asyncio.Event) -> None:
        nonlocal starts
        starts += 1
        if starts <= 2:
            raise RuntimeError(f"boom {starts}")
        await stop.wait()

    sup.start("scheduler", flaky)
    [health] = await await_until(
        sup.health, 30, "two restarts", done=lambda h: h[0].restarts == 2 and h[0].running
    )
    assert (health.name, health.errors) == ("scheduler", 2)
    assert health.last_error == "RuntimeError: boom 2" and health.last_error_at is not None
    stopping.set()
    await sup.wait(10)
    [health] = sup.health()
    assert not health.running and starts == 3


async def test_a_loop_that_returns_while_the_daemon_runs_is_restarted() -> None:
    stopping = asyncio.Event()
    sup = Supervisor(stopping, base_s=0.01, cap_s=0.05)
    runs = 0

    async def quits(stop: asyncio.Event) -> None:
        nonlocal runs
        runs += 1
        if runs > 1:
            await stop.wait()

    sup.start("quitter", quits)
    [health] = await await_until(sup.health, 30, "a restart", done=lambda h: h[0].restarts)
    assert "returned while the daemon runs" in health.last_error
    stopping.set()
    await sup.wait(10)


class _DownStore:
    """A sweep queue whose store does not answer ``fail`` times, then answers (nothing queued)."""

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.claims = 0

    def reap(self) -> int:
        return 0

    def claim(self, owner: str, limit: int, lease_s: float) -> list[Entry]:
        self.claims += 1
        if self.claims <= self.fail:
            raise StoreError("state store error: connection refused")
        return []

    def heartbeat(self, owner: str, lease_s: float) -> set[int]:
        return set()

    def pending(self) -> int:
        return 0


async def test_the_scheduler_asks_the_store_again_after_it_failed() -> None:
    """Before: the first StoreError ended ``Scheduler.run`` and nothing was claimed again."""
    queue = _DownStore(fail=2)
    errors: list[BaseException] = []
    settings = SchedulerSettings(full_wait_s=0.01, store_retry_s=0.01)
    q: Any = queue  # the scheduler's view of its queue: these calls
    no_control: Any = None  # nothing is claimed, so nothing is placed
    sched = Scheduler(q, no_control, settings, on_error=errors.append)
    stopping = asyncio.Event()
    task = asyncio.create_task(sched.run(stopping))
    try:
        await await_until(
            lambda: queue.claims, 60, "claims once the store answers", done=lambda n: n > 2
        )
        assert not task.done(), task
        assert len(errors) == 2 and all(isinstance(e, StoreError) for e in errors)
    finally:
        stopping.set()
        await asyncio.wait_for(task, 30)
