"""Waiting for a task's start (``GET /api/tasks/{id}?wait_s=``): answered at the state write
that starts or ends it, or after the wait with where the task stands."""

from __future__ import annotations

import asyncio

import pytest

from tcl.shim import startwait
from tcl.shim.api import ExecutorKind, Ports, TaskInfo, TaskStatus
from tcl.shim.errors import NotFound
from tcl.shim.startwait import StartWaits


def _info(status: TaskStatus, runner: int | None = None) -> TaskInfo:
    return TaskInfo(
        id="t",
        name="t",
        status=status,
        network="host",
        ports=Ports(runner=runner),
        executor=ExecutorKind.PROCESS,
        created_at=0,
        updated_at=0,
    )


class Tasks:
    def __init__(self) -> None:
        self.now = _info(TaskStatus.PENDING)
        self.reads = 0

    def get(self, task_id: str) -> TaskInfo:
        if task_id != "t":
            raise NotFound(f"no task {task_id!r}")
        self.reads += 1
        return self.now


async def test_a_waiter_is_answered_at_the_write_that_starts_its_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(startwait, "RECHECK_S", 3600.0)  # only a write can wake it
    tasks, waits = Tasks(), StartWaits()
    waiter = asyncio.create_task(waits.wait(tasks.get, "t", 30.0))
    await asyncio.sleep(0)
    tasks.now = _info(TaskStatus.CREATING)
    waits.notify("t")
    await asyncio.sleep(0.01)
    assert not waiter.done()  # creating is not started
    tasks.now = _info(TaskStatus.RUNNING, runner=4242)
    waits.notify("t")
    info = await asyncio.wait_for(waiter, 30.0)
    assert info.status is TaskStatus.RUNNING and info.ports.runner == 4242
    assert tasks.reads == 3  # once, then at each write


async def test_an_ended_task_answers_and_an_unknown_one_raises_at_once() -> None:
    tasks, waits = Tasks(), StartWaits()
    tasks.now = _info(TaskStatus.TERMINATED)
    assert (await waits.wait(tasks.get, "t", 30.0)).status is TaskStatus.TERMINATED
    with pytest.raises(NotFound):
        await waits.wait(tasks.get, "other", 30.0)


async def test_a_task_not_started_within_the_wait_is_answered_as_it_stands() -> None:
    tasks, waits = Tasks(), StartWaits()
    tasks.now = _info(TaskStatus.PULLING)
    info = await waits.wait(tasks.get, "t", 0.1)
    assert info.status is TaskStatus.PULLING


async def test_a_change_written_without_a_notice_is_seen_at_the_next_recheck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pull's progress is written from its thread, with no notice: the waiter looks again
    every RECHECK_S however the state was written."""
    monkeypatch.setattr(startwait, "RECHECK_S", 0.01)
    tasks, waits = Tasks(), StartWaits()
    waiter = asyncio.create_task(waits.wait(tasks.get, "t", 30.0))
    await asyncio.sleep(0)
    tasks.now = _info(TaskStatus.RUNNING, runner=1)
    info = await asyncio.wait_for(waiter, 30.0)
    assert info.status is TaskStatus.RUNNING and tasks.reads == 2
