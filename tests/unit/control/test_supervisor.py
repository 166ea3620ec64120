"""The daemon's loops under supervision: a loop that dies is started again and its error shown;
the sweep scheduler survives a state store that stops answering for a while."""

from __future__ import annotations

import asyncio
from typing import Any

from tcl.control.daemon.supervisor import Supervisor
from tcl.control.errors import StoreError
from tcl.control.sweep.model import Entry, EntryState
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

    def claim(self, owner: str, limit: int, lease_s: float, scheduler: str = "") -> list[Entry]:
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


class _PlacingDownStore(_DownStore):
    """The store goes away while an entry is being placed: reading its matrix fails, and so
    does the first try to hand the entry back."""

    def __init__(self) -> None:
        super().__init__(fail=0)
        self.released: list[tuple[int, str]] = []
        self.release_tries = 0

    def matrix(self, name: str) -> Any:
        raise StoreError("state store error: connection refused")

    def release(self, owner: str, entry_id: int, not_before: float, why: str) -> None:
        self.release_tries += 1
        if self.release_tries == 1:
            raise StoreError("state store error: connection refused")
        self.released.append((entry_id, why))

    def finish(self, *args: Any) -> None:
        raise AssertionError(f"an outage failed the entry: {args}")


async def test_an_entry_being_placed_in_an_outage_goes_back_to_the_queue() -> None:
    """Before: the StoreError ended the entry as failed, whose recording failed too, and the
    entry stayed claimed (its lease renewed by the heartbeat) for ever."""
    queue = _PlacingDownStore()
    q: Any = queue
    no_control: Any = None
    sched = Scheduler(q, no_control, SchedulerSettings(store_retry_s=0.01))
    entry = Entry(
        id=7,
        matrix="m",
        job_id="j7",
        fields={},
        state=EntryState.CLAIMED,
        priority=0,
        not_before=0.0,
        lease_owner=sched.owner,
        lease_expires=None,
        claims=1,
        run_id="run-j7",
        last_error="",
        created_at=0.0,
        started_at=None,
        ended_at=None,
    )
    assert await asyncio.wait_for(sched._start_or_end(entry), 30)
    assert queue.release_tries == 2
    [(entry_id, why)] = queue.released
    assert entry_id == 7 and "state store did not answer" in why
