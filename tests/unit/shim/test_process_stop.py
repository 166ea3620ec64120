"""Stopping a runner always ends: CI42's hang (600 s) was a stop whose SIGKILL went to a process
group that did not exist yet (the fork server had answered before its wrapper led a session), so
the kill reached nobody and the wait for the wrapper's end never ended."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import psutil

from tcl.shim.executors.cgroup import TaskProcesses
from tcl.shim.executors.process_executor import ProcessExecutor
from tcl.shim.store import Handle

# ignores SIGTERM, as a wrapper does; leads no group of its own
STUBBORN = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True);"
    " time.sleep(120)",
]


async def test_a_runner_that_leads_no_group_is_still_stopped(tmp_path: Path) -> None:
    instance = f"stop{os.getpid()}"
    ex = ProcessExecutor(
        runner_argv=STUBBORN,
        instance_id=instance,
        tasks_dir=tmp_path / "tasks",
        processes=TaskProcesses(instance, cgroup_root=None),
    )
    # in this test's group, not a session of its own
    proc = subprocess.Popen(STUBBORN, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        await asyncio.to_thread(proc.stdout.readline)  # SIGTERM is ignored from now on
        assert os.getpgid(proc.pid) != proc.pid
        handle = Handle(pid=proc.pid, pid_start_time=psutil.Process(proc.pid).create_time())
        await asyncio.wait_for(ex.stop("t", handle, 0.2), timeout=20)
        assert proc.wait(5) == -9
    finally:
        proc.kill()
        proc.wait()
