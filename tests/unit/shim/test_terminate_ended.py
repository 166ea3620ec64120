"""Terminating a task whose job had already ended (what the workstation does once it kept a
finished run's logs): its accelerators are freed and the call returns at once; the runner's
own exit (a quarter second for a process, more for a container) goes on in the background,
and a remove right after it takes the record at once and the workload and files once the
runner has exited. Before, both calls waited for the runner to exit, and a sweep's next entry
waited with them (``bench.sweep_gap``)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tcl.shim import service as service_module
from tcl.shim.api import TaskSpec, TaskStatus, TerminateRequest, TerminationReason
from tcl.shim.errors import NotFound
from tcl.shim.probe import JobStop
from tcl.shim.store import Handle
from tests.polling import await_until
from tests.unit.shim.fakes import FakeExecutor, fake_service


class SlowToExit(FakeExecutor):
    """A runner that exits only once the test lets it."""

    def __init__(self) -> None:
        super().__init__()
        self.exit_now = asyncio.Event()
        self.removed: list[str] = []

    async def stop(self, task_id: str, handle: Handle, timeout_s: float) -> int | None:
        self.stops.append(task_id)
        await self.exit_now.wait()
        return await super().stop(task_id, handle, timeout_s)

    async def remove(self, task_id: str, handle: Handle) -> None:
        await self.exit_now.wait()
        self.removed.append(task_id)
        await super().remove(task_id, handle)


async def _ended_on_its_own(port: int, token: str, grace_s: float) -> JobStop:
    return JobStop(ended=True, before=True, exit_code=0)  # what its runner says: succeeded


async def test_an_ended_job_s_task_frees_its_chips_without_waiting_for_its_runner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service_module, "stop_job", _ended_on_its_own)
    ex = SlowToExit()
    svc = fake_service(tmp_path, ex)
    await svc.submit(TaskSpec(id="a", image="img", accelerators=4))
    await await_until(
        lambda: svc.get("a"), 30, "a running", done=lambda i: i.status is TaskStatus.RUNNING
    )
    req = TerminateRequest(reason=TerminationReason.DONE, message="run succeeded", timeout_s=5)

    info = await asyncio.wait_for(svc.terminate("a", req), 10)

    assert (info.status, info.termination_reason, info.exit_code) == (
        TaskStatus.TERMINATED,
        TerminationReason.DONE,
        0,
    )
    assert svc.allocator.held() == {}  # the next task gets the chips now
    assert ex.stops == ["a"] and svc.is_busy("a")  # its runner is still exiting
    nxt = await svc.submit(TaskSpec(id="b", image="img", accelerators=4))
    assert nxt.accelerators == [0, 1, 2, 3]

    await asyncio.wait_for(svc.remove("a"), 10)
    with pytest.raises(NotFound):
        svc.get("a")
    assert ex.removed == []  # the workload goes once the runner has exited

    ex.exit_now.set()
    await await_until(lambda: ex.removed, 30, "the runner's workload removed", done=bool)
    await await_until(
        lambda: [p.name for p in (tmp_path / "tasks").iterdir() if p.name != "b"],
        30,
        "a's files removed",
        done=lambda left: left == [],
    )
    assert not svc.is_busy("a")
    await svc.close()
