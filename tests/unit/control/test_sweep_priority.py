"""Priority order across a scheduler's batches: a lower-priority batch claimed while a higher
one is still being placed never takes the one free GPU first. The real scheduler loop and queue
(SQLite); only the placement is a one-GPU stand-in whose high-priority placements are slow (a
loaded solver), so that the next batch is claimed meanwhile. End to end on the local default:
tests/integration/control/test_sweep_local.py::test_higher_priority_entries_run_first_on_one_gpu.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tcl.control.errors import NoPlacementError
from tcl.control.service import Control
from tcl.control.sweep.model import Entry, EntryState
from tcl.control.sweep.queue import NewEntry, SweepQueue
from tcl.control.sweep.scheduler import Scheduler, SchedulerSettings
from tcl.control.sweep.turns import PriorityTurns

SPEC = {"argv": ["true"], "chips": 1}


class OneGpu(Scheduler):
    """Places an entry on the one GPU when it is free (else: nothing free); its run takes
    ``run_s``. Placing a priority-5 entry takes ``slow_s`` first."""

    def __init__(self, queue: SweepQueue, slow_s: float, run_s: float) -> None:
        settings = SchedulerSettings(heartbeat_s=0.2, full_wait_s=0.05, batch=16)
        super().__init__(queue, control_for=_no_control, settings=settings, owner="one-gpu")
        self.slow_s = slow_s
        self.run_s = run_s
        self.busy_with: str | None = None
        self.order: list[str] = []

    async def _start(self, entry: Entry) -> bool:
        if entry.priority == 5:
            await asyncio.sleep(self.slow_s)
        if self.busy_with is not None:
            raise NoPlacementError(f"the GPU runs {self.busy_with}", [])
        self.busy_with = entry.job_id
        self.order.append(entry.job_id)
        assert await asyncio.to_thread(self.queue.started, self.owner, entry.id)
        self.watchers[entry.id] = asyncio.create_task(self._run(entry))
        return True

    async def _run(self, entry: Entry) -> None:
        await asyncio.sleep(self.run_s)
        self.busy_with = None
        self.admission.run_ended()
        self.watchers.pop(entry.id, None)
        await asyncio.to_thread(self.queue.finish, self.owner, entry.id, EntryState.DONE)
        self._wake.set()


def _no_control(config_path: str, named: bool) -> Control:
    raise AssertionError("the stand-in places nothing through a Control")


@pytest.fixture
def queue(sqlite_queue: SweepQueue) -> SweepQueue:
    return sqlite_queue


def _entries(prefix: str, priority: int) -> list[NewEntry]:
    return [NewEntry(f"{prefix}{i}", {}, priority=priority) for i in range(3)]


async def _until(check: Callable[[], object], timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():
            await asyncio.sleep(0.02)


def test_a_later_lower_batch_waits_for_the_higher_batch_being_placed(queue: SweepQueue) -> None:
    async def scenario() -> list[str]:
        sched = OneGpu(queue, slow_s=1.0, run_s=0.05)
        stopping = asyncio.Event()
        loop = asyncio.create_task(sched.run(stopping))
        queue.add("high", SPEC, _entries("high", 5))
        # the high batch is claimed and being placed (slowly) when the low one is added
        await _until(lambda: sched._placing > 0, 10)
        queue.add("low", SPEC, _entries("low", 1))
        sched._wake.set()
        await _until(lambda: len(sched.order) == 6, 60)
        stopping.set()
        await loop
        return sched.order

    order = asyncio.run(scenario())
    assert sorted(order[:3]) == ["high0", "high1", "high2"], order
    assert sorted(order[3:]) == ["low0", "low1", "low2"], order


def test_a_group_goes_back_untried_when_a_higher_one_found_nothing_free() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        turns = PriorityTurns()
        high = turns.claimed([5])
        low = turns.claimed([1, 0])
        waiting = asyncio.create_task(turns.turn(low, 1))
        await asyncio.sleep(0)
        assert not waiting.done()  # the higher group is being placed
        assert await turns.turn(high, 5)
        turns.done(5, refused=True)
        later = turns.claimed([1])  # claimed after the refusal: it may try
        return await waiting, await turns.turn(later, 1), await turns.turn(low, 5)

    low_may_try, later_may_try, higher_than_refused = asyncio.run(scenario())
    assert (low_may_try, later_may_try, higher_than_refused) == (False, True, True)
