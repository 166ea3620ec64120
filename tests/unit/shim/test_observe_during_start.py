"""A reconcile pass that looks at a task while the same task is being started must not end the
runner it never saw (CI41: a sweep entry's runner was killed 1.3 s after its start, its task
ended ``vanished``). The pass took the task's record (no runner yet), scanned the processes in a
thread, and meanwhile the task's runner was started; on return it found "no runner" and ended
every process of the task, the new runner included."""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from pathlib import Path

import psutil

from tcl.shim.api import NetworkMode, TaskSpec
from tcl.shim.executors.base import Launch, Liveness
from tcl.shim.executors.cgroup import TaskProcesses
from tcl.shim.executors.process_executor import ProcessExecutor
from tcl.shim.store import Handle, TaskRecord
from tests.unit.shim.fakes import FakeExecutor, fake_service

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


async def test_a_scan_in_flight_spares_a_runner_started_meanwhile(tmp_path: Path) -> None:
    tasks_dir = tmp_path / "tasks"
    (tasks_dir / "t1").mkdir(parents=True)
    ex = ProcessExecutor(
        runner_argv=SLEEPER,
        instance_id=f"race{os.getpid()}",
        tasks_dir=tasks_dir,
        processes=TaskProcesses(f"race{os.getpid()}", cgroup_root=None),  # markers
    )
    in_scan, go_on = threading.Event(), threading.Event()

    def slow_scan() -> dict[str, Handle]:  # a loaded host: psutil's process list takes a while
        in_scan.set()
        go_on.wait(30)
        return {}

    ex._scan = slow_scan  # type: ignore[method-assign]
    observing = asyncio.create_task(ex.observe({"t1": Handle()}))
    await asyncio.to_thread(in_scan.wait, 30)
    launch = Launch(
        spec=TaskSpec(id="t1", image=""),
        accelerators=[],
        network=NetworkMode.HOST,
        task_dir=tasks_dir / "t1",
    )
    started = await ex.start(launch)
    try:
        go_on.set()
        seen = await observing
        assert seen["t1"].liveness is Liveness.MISSING  # what the pass saw: no runner yet
        await asyncio.sleep(0.2)  # a kill sent by the pass would have landed by now
        assert started.handle.pid is not None
        proc = psutil.Process(started.handle.pid)
        assert proc.status() != psutil.STATUS_ZOMBIE, "the runner started meanwhile was ended"
        assert (await ex.observe({"t1": started.handle}))["t1"].liveness is Liveness.ALIVE
    finally:
        await ex.stop("t1", started.handle, 5)


async def test_a_task_being_recorded_is_busy(tmp_path: Path) -> None:
    """From the moment its record exists until its lifecycle took it, a task is its submit's:
    a reconcile pass leaves it alone."""
    svc = fake_service(tmp_path, FakeExecutor(), "h100:1")
    store = svc.store
    seen: list[bool] = []
    add = store.add

    def add_and_look(record: TaskRecord) -> TaskRecord:
        out = add(record)
        seen.append(svc.is_busy(record.info.id))  # the record exists; the submit goes on
        return out

    store.add = add_and_look  # type: ignore[method-assign]
    await svc.submit(TaskSpec(id="a", image="img", accelerators=1))
    assert seen == [True]
