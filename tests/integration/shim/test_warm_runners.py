"""Warm runners (issue 29): the process executor binds a task to a runner started before it,
and that runner behaves as a cold one would; the pool refills, never leaks a secret onto a
command line, and nothing of it outlives a killed shim but the runners that have tasks."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import time
from pathlib import Path

import psutil

from tcl.runner.api import RunnerState
from tcl.shim.api import NetworkMode, TaskSpec, TaskStatus, TerminationReason
from tcl.shim.executors.base import Launch, Liveness
from tcl.shim.executors.cgroup import TaskProcesses
from tcl.shim.executors.process_executor import WRAPPER, ProcessExecutor
from tcl.shim.executors.warmpool import WarmPool
from tcl.shim.server import default_runner_argv
from tcl.shim.store import Handle
from tcl.tokenfile import new_token
from tests.integration.shim.conftest import ShimFactory
from tests.integration.shim.harness import (
    Shim,
    cleanup_processes,
    job_outcome,
    start_job,
    wait_status,
)

NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
SECRET = "warm-secret-6b1f0c"
# What a cold runner's job sees: its GPUs, the spec's env, its task id, its dir; then waits for
# a file, so the test can kill the shim while it runs.
PRINT_ENV = (
    "import hashlib, os, sys, time\n"
    "digest = hashlib.sha256(os.environ['S'].encode()).hexdigest()\n"
    "print('gpus=' + os.environ['CUDA_VISIBLE_DEVICES'], 'x=' + os.environ['X'],\n"
    "      'task=' + os.environ['TCL_TASK_ID'], 'secret=' + str(digest == sys.argv[2]),\n"
    "      flush=True)\n"
    "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
)


def warm_wrappers(instance: str) -> set[int]:
    """Unbound or bound: the instance's ``procwrap --warm`` processes."""
    out = set()
    for p in psutil.process_iter(["pid", "cmdline", "status"]):
        cmd = p.info.get("cmdline") or []
        if (
            any(a.endswith("procwrap.py") for a in cmd)
            and "--warm" in cmd
            and instance in cmd
            and p.info["status"] != psutil.STATUS_ZOMBIE
        ):
            out.add(int(p.info["pid"]))
    return out


async def until(check: object, timeout_s: float = 30) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {check}"
        await asyncio.sleep(0.05)


def handle_pid(shim: Shim, task_id: str) -> int:
    task = json.loads((shim.state_dir / "tasks" / task_id / "task.json").read_text())
    pid = task["handle"]["pid"]
    assert isinstance(pid, int)
    return pid


async def test_a_task_gets_a_warm_runner_that_behaves_as_a_cold_one(
    make_shim: ShimFactory, tmp_path: Path
) -> None:
    shim = await make_shim("--fake-accelerators", "h100:2", "--warm-runners", "2", env=NO_DOCKER)
    await until(lambda: len(warm_wrappers(shim.instance)) == 2)
    ready = warm_wrappers(shim.instance)
    go = tmp_path / "go"
    async with shim.client() as c:
        spec = TaskSpec(id="a", accelerators=1, env={"X": "1", "S": SECRET})
        await c.submit_task(spec)
        a = await wait_status(c, "a", TaskStatus.RUNNING)
        wrapper = handle_pid(shim, "a")
        assert wrapper in ready, "the task was not given one of the warm runners"
        runner = psutil.Process(wrapper).children()
        assert len(runner) == 1 and runner[0].cmdline()[-1] == "warm"
        digest = hashlib.sha256(SECRET.encode()).hexdigest()
        await start_job(a, ["python3", "-c", PRINT_ENV, str(go), digest])
        # The pool refills: two unbound ones again, besides the bound one.
        await until(lambda: len(warm_wrappers(shim.instance) - {wrapper}) == 2)
        # The secret travelled through a pipe: no command line holds it.
        for p in psutil.process_iter(["cmdline"]):
            assert SECRET not in " ".join(p.info.get("cmdline") or [])
        # The runner and the job are the task's (its cgroup, or its marker: what ends with it).
        assert (shim.state_dir / "tasks" / "a" / "runner.log").exists()

    shim.kill(signal.SIGKILL)  # mid-job
    unbound = warm_wrappers(shim.instance) - {wrapper}
    # The unbound ones read end of file and go; the bound one runs on (its own session).
    await until(lambda: not (warm_wrappers(shim.instance) & unbound), timeout_s=15)
    assert psutil.pid_exists(wrapper)
    shim2 = await make_shim(
        "--fake-accelerators", "h100:2", "--warm-runners", "2", env=NO_DOCKER, port=shim.port
    )
    async with shim2.client() as c:
        after = await c.get_task("a")
        assert after.status is TaskStatus.RUNNING and after.ports == a.ports
        go.touch()
        state, stdout = await job_outcome(a)
        assert state is RunnerState.SUCCEEDED
        assert stdout.split() == [f"gpus={a.accelerators[0]}", "x=1", "task=a", "secret=True"]
        done = await wait_status(c, "a", TaskStatus.TERMINATED, timeout_s=20)
        assert (done.termination_reason, done.exit_code) == (TerminationReason.DONE, 0)
        await c.remove_task("a")
        await until(lambda: not psutil.pid_exists(wrapper) or _zombie(wrapper))


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_no_warm_runners_with_zero_and_a_stopped_shim_leaves_none(
    make_shim: ShimFactory,
) -> None:
    cold = await make_shim("--warm-runners", "0", env=NO_DOCKER, state="cold")
    async with cold.client() as c:
        await c.submit_task(TaskSpec(id="c"))
        await wait_status(c, "c", TaskStatus.RUNNING)
        cmd = psutil.Process(handle_pid(cold, "c")).cmdline()
        assert "--tcl-task" in cmd and "--warm" not in cmd
    assert warm_wrappers(cold.instance) == set()
    warm = await make_shim("--warm-runners", "3", env=NO_DOCKER, state="warm")
    await until(lambda: len(warm_wrappers(warm.instance)) == 3)
    members = warm_wrappers(warm.instance)
    runners = {c.pid for pid in members for c in psutil.Process(pid).children()}
    warm.kill(signal.SIGTERM)  # a clean stop ends the pool, wrappers and runners
    await until(lambda: not any(psutil.pid_exists(p) and not _zombie(p) for p in members | runners))
    assert os.path.exists(warm.state_dir / "warm-runners.log")


async def test_a_bound_warm_runner_whose_handle_was_never_recorded_is_found_and_ended(
    tmp_path: Path,
) -> None:
    """A shim that died between binding a warm runner and recording its handle: the next one
    finds the runner through the task's dir (adopted if the task is known, else an orphan)."""
    instance = f"warm-{os.getpid()}-{time.monotonic_ns()}"
    tasks = tmp_path / "tasks"
    argv = default_runner_argv(None)
    pool = WarmPool(WRAPPER, argv, instance, tmp_path / "warm.log", size=1)
    ex = ProcessExecutor(argv, instance, tasks, processes=TaskProcesses(instance, None), pool=pool)
    try:
        await ex.warm_up()
        await until(lambda: len(pool) == 1)
        task_dir = tasks / "t"
        task_dir.mkdir(parents=True)
        launch = Launch(TaskSpec(id="t"), [], NetworkMode.HOST, task_dir)
        launch.runner_token_file.write_text(new_token())
        launch.runner_token_file.chmod(0o600)
        started = await ex.start(launch)
        assert ex.warm_starts == 1 and started.handle.pid in warm_wrappers(instance)
        seen = await ex.observe({"t": Handle()})  # no pid recorded
        assert seen["t"].liveness is Liveness.ALIVE
        assert seen["t"].handle is not None and seen["t"].handle.pid == started.handle.pid
        assert await ex.orphans(["t"]) == []
        [orphan] = await ex.orphans([])
        assert orphan == f"t:{started.handle.pid}"
        await ex.remove_orphan(orphan)
        pid = started.handle.pid
        assert pid is not None
        await until(lambda: _zombie(pid) or ex._reap("t", started.handle) is not None)
        await until(lambda: warm_wrappers(instance) - {pid} != set())  # the pool refilled
    finally:
        await ex.close()
        cleanup_processes(instance)
    await until(lambda: all(_zombie(p) for p in warm_wrappers(instance)))
