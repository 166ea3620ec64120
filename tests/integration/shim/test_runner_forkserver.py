"""The runner fork server (issue 29): the process executor forks each task's runner from one
process that imported everything once, and that runner behaves as a cold one would; no secret
reaches a command line, and nothing of the server outlives a killed shim but the runners that
have tasks."""

from __future__ import annotations

import asyncio
import functools
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
from tcl.shim.executors.forkclient import RunnerForkServer
from tcl.shim.executors.process_executor import FORKED_DIR, ProcessExecutor
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


def forkservers(instance: str) -> set[int]:
    """The instance's fork server (never more than one), not its forks: their parent is not
    one of them."""
    found = {}
    for p in psutil.process_iter(["pid", "ppid", "cmdline", "status"]):
        cmd = p.info.get("cmdline") or []
        if "forkserver" in cmd and instance in cmd and p.info["status"] != psutil.STATUS_ZOMBIE:
            found[int(p.info["pid"])] = int(p.info["ppid"])
    return {pid for pid, ppid in found.items() if ppid not in found}


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


async def test_a_task_s_runner_is_forked_and_behaves_as_a_cold_one(
    make_shim: ShimFactory, tmp_path: Path
) -> None:
    shim = await make_shim("--fake-accelerators", "h100:2", env=NO_DOCKER)
    await until(lambda: len(forkservers(shim.instance)) == 1)
    [server] = forkservers(shim.instance)
    go = tmp_path / "go"
    async with shim.client() as c:
        spec = TaskSpec(id="a", accelerators=1, env={"X": "1", "S": SECRET})
        await c.submit_task(spec)
        a = await wait_status(c, "a", TaskStatus.RUNNING)
        wrapper = psutil.Process(handle_pid(shim, "a"))
        assert wrapper.ppid() == server, "the task's wrapper was not forked by the server"
        assert os.getsid(wrapper.pid) == wrapper.pid  # it leads a session of its own
        # the wrapper forks the runner after the server's reply: under load, moments later
        await until(lambda: len(wrapper.children()) == 1)
        [runner] = wrapper.children()
        digest = hashlib.sha256(SECRET.encode()).hexdigest()
        await start_job(a, ["python3", "-c", PRINT_ENV, str(go), digest])
        # The secret travelled through a pipe: no command line holds it.
        for p in psutil.process_iter(["cmdline"]):
            assert SECRET not in " ".join(p.info.get("cmdline") or [])
        assert (shim.state_dir / "tasks" / "a" / "runner.log").exists()

    shim.kill(signal.SIGKILL)  # mid-job
    # The server reads end of file and goes; the task's wrapper and runner run on.
    await until(lambda: _zombie(server), timeout_s=15)
    assert not _zombie(wrapper.pid) and not _zombie(runner.pid)
    shim2 = await make_shim("--fake-accelerators", "h100:2", env=NO_DOCKER, port=shim.port)
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
        await until(lambda: _zombie(wrapper.pid) and _zombie(runner.pid))


async def test_a_forked_runner_leads_its_session_when_its_pid_is_answered(tmp_path: Path) -> None:
    """The pid the shim gets names a session at once: a stop sent to it right away ends the
    task (CI42: a kill sent before the wrapper's ``setsid`` reached nobody; the stop waited for
    ever)."""
    instance, server, ex = _forking_executor(tmp_path)
    tasks = tmp_path / "tasks"
    try:
        await ex.open()
        for i in range(30):
            task_dir = tasks / f"t{i}"
            task_dir.mkdir(parents=True)
            launch = Launch(TaskSpec(id=f"t{i}"), [], NetworkMode.HOST, task_dir)
            launch.runner_token_file.write_text(new_token())
            launch.runner_token_file.chmod(0o600)
            handle = (await ex.start(launch)).handle
            pid = handle.pid
            assert pid is not None
            assert os.getsid(pid) == pid, f"start {i}: not a session yet"
            await asyncio.wait_for(ex.remove(f"t{i}", handle), timeout=30)
            await until(functools.partial(_zombie, pid))
        assert server.forks == 30
    finally:
        await ex.close()
        cleanup_processes(instance)


def _forking_executor(tmp_path: Path) -> tuple[str, RunnerForkServer, ProcessExecutor]:
    """A process executor of a shim instance of its own (tasks in ``tmp_path/tasks``) that forks
    its runners from a fork server."""
    instance = f"fork-{os.getpid()}-{time.monotonic_ns()}"
    argv = default_runner_argv(None)
    server = RunnerForkServer(argv, instance, tmp_path / "forkserver.log")
    processes = TaskProcesses(instance, None)
    ex = ProcessExecutor(argv, instance, tmp_path / "tasks", processes=processes, forkserver=server)
    return instance, server, ex


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def test_without_the_fork_server_runners_start_cold_and_a_stopped_shim_ends_it(
    make_shim: ShimFactory,
) -> None:
    cold = await make_shim("--no-runner-forkserver", env=NO_DOCKER, state="cold")
    async with cold.client() as c:
        await c.submit_task(TaskSpec(id="c"))
        await wait_status(c, "c", TaskStatus.RUNNING)
        cmd = psutil.Process(handle_pid(cold, "c")).cmdline()
        assert "--tcl-task" in cmd and "forkserver" not in cmd
    assert forkservers(cold.instance) == set()
    warm = await make_shim(env=NO_DOCKER, state="warm")
    await until(lambda: len(forkservers(warm.instance)) == 1)
    [server] = forkservers(warm.instance)
    warm.kill(signal.SIGTERM)  # a clean stop ends it
    await until(lambda: _zombie(server))
    assert os.path.exists(warm.state_dir / "runner-forkserver.log")


async def test_a_forked_runner_whose_handle_was_never_recorded_is_found_and_a_dead_server_restarts(
    tmp_path: Path,
) -> None:
    """A shim that died between forking a runner and recording its handle: the next one finds
    the runner through its record (adopted if the task is known, else an orphan, even once the
    task's dir is gone). A server
    that died: that task starts cold, the next is forked from a new server."""
    instance, server, ex = _forking_executor(tmp_path)
    tasks = tmp_path / "tasks"

    async def start(task_id: str) -> int:
        task_dir = tasks / task_id
        task_dir.mkdir(parents=True)
        launch = Launch(TaskSpec(id=task_id), [], NetworkMode.HOST, task_dir)
        launch.runner_token_file.write_text(new_token())
        launch.runner_token_file.chmod(0o600)
        pid = (await ex.start(launch)).handle.pid
        assert pid is not None
        return pid

    try:
        await ex.open()
        pid = await start("t")
        assert server.forks == 1 and psutil.Process(pid).ppid() == server.pid
        seen = await ex.observe({"t": Handle()})  # no pid recorded
        assert seen["t"].liveness is Liveness.ALIVE
        assert seen["t"].handle is not None and seen["t"].handle.pid == pid
        assert await ex.orphans(["t"]) == []
        # a task removed while its runner still exits (its dir moved aside, as the store's
        # remove does): found all the same
        (tasks / "t").rename(tmp_path / "trash-t")
        [orphan] = await ex.orphans([])
        assert orphan == f"t:{pid}"
        await ex.remove_orphan(orphan)
        await until(lambda: _zombie(pid))
        assert server.pid is not None
        os.kill(server.pid, signal.SIGKILL)
        await until(lambda: _zombie(server.pid or 0))
        again = await start("u")
        assert server.starts == 2 and server.forks == 2
        assert psutil.Process(again).ppid() == server.pid
        # its removal deletes its record at once (not left for a later scan to delete)
        record = tmp_path / FORKED_DIR / str(again)
        assert record.exists()
        await ex.remove("u", Handle(pid=again, pid_start_time=psutil.Process(again).create_time()))
        assert not record.exists()
    finally:
        await ex.close()
        cleanup_processes(instance)
