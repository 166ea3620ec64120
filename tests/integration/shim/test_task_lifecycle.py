"""A task's accelerators and processes end with its job, with no client connected.

Real shim, real runner (process executor), real processes. Each test is an attack that worked on
an earlier main: a detached job kept its GPUs until its owner looked; a killed or frozen runner
left its job (own session) on a GPU the shim handed to the next task; daemons started by the job
survived its exit and its stop; finished runners piled up.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from tcl.runner.api import RunnerState
from tcl.runner.client import RunnerAPIError, RunnerClient
from tcl.runner.events import EventLog
from tcl.shim.api import TaskInfo, TaskSpec, TaskStatus, TerminationReason
from tcl.shim.client import ShimClient
from tests.integration.shim.conftest import ShimFactory
from tests.integration.shim.harness import Shim, runner_client, start_job, wait_status
from tests.polling import await_until

NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
RETENTION_S = 4
SILENCE_S = 3
SHIM_ARGS = (
    "--fake-accelerators",
    "h100:8",
    "--finished-retention-s",
    str(RETENTION_S),
    "--runner-silence-limit-s",
    str(SILENCE_S),
)

# Starts a daemon in a session of its own (what a careless job or a job's library does), writes
# its pid where the test can read it, then either exits or keeps running.
DAEMON = """
import subprocess, sys, time
d = subprocess.Popen(["sleep", "600"], start_new_session=True)
open(sys.argv[1], "w").write(str(d.pid))
print("daemon", d.pid, flush=True)
if sys.argv[2] == "stay":
    time.sleep(600)
"""


def _wait_pid(path: Path, timeout_s: float = 30) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"no pid in {path}")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def _gone(pid: int, timeout_s: float = 15) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


def _runner_pid(shim: Shim, task_id: str) -> int:
    """The task's runner: the one child of its wrapper (the handle's pid), warm or cold."""
    task = json.loads((shim.state_dir / "tasks" / task_id / "task.json").read_text())
    children = psutil.Process(task["handle"]["pid"]).children()
    assert len(children) == 1, f"task {task_id}'s wrapper has children {children}"
    return children[0].pid


async def _held(c: ShimClient, task_id: str) -> list[int]:
    host = await c.host()
    return [a.index for a in host.accelerators if a.task_id == task_id]


async def _daemon_job(
    c: ShimClient, task_id: str, accelerators: int, pid_file: Path, then: str
) -> tuple[TaskInfo, int]:
    """A running task whose job started a setsid daemon, then exits or stays; (task, daemon)."""
    await c.submit_task(TaskSpec(id=task_id, accelerators=accelerators))
    task = await wait_status(c, task_id, TaskStatus.RUNNING)
    await start_job(task, ["python3", "-c", DAEMON, str(pid_file), then])
    return task, _wait_pid(pid_file)


async def test_a_finished_job_frees_its_accelerators_and_daemons_with_no_client(
    make_shim: ShimFactory, tmp_path: Path
) -> None:
    shim = await make_shim(*SHIM_ARGS, env=NO_DOCKER)
    pid_file = tmp_path / "daemon.pid"
    async with shim.client() as c:
        task, daemon = await _daemon_job(c, "detached", 8, pid_file, "exit")
        # Nobody follows the run: the shim alone sees the job end and frees the 8 GPUs.
        done = await wait_status(c, "detached", TaskStatus.TERMINATED, timeout_s=30)
        assert done.termination_reason is TerminationReason.DONE and done.exit_code == 0
        assert await _held(c, "detached") == []
        assert await _gone(daemon), "the job's setsid daemon outlived it"
        # The next task gets every GPU at once.
        nxt = await c.submit_task(TaskSpec(id="next", accelerators=8))
        assert nxt.accelerators == list(range(8))
        # The finished run's logs are still served (the runner lingers for the retention).
        async with runner_client(task) as runner:
            lines = [e.data async for e in runner.poll(0, wait_s=1) if e.stream == "stdout"]
        assert lines == [f"daemon {daemon}\n"]
        runner_pid = _runner_pid(shim, "detached")
        # After the retention the runner and its files are gone (nothing piles up); the record
        # stays, so a workstation that never fetched the logs still learns the outcome.
        deadline = time.monotonic() + RETENTION_S + 30
        while (expired := await c.get_task("detached")).runner_token is not None:
            assert time.monotonic() < deadline, "the finished task never expired"
            await asyncio.sleep(0.2)
        assert expired.ports.runner is None
        assert (expired.termination_reason, expired.exit_code) == (TerminationReason.DONE, 0)
        assert await _gone(runner_pid)
        task_dir = shim.state_dir / "tasks" / "detached"
        assert [p.name for p in task_dir.iterdir()] == ["task.json"]


async def test_the_runner_refuses_callers_without_the_tasks_token(
    make_shim: ShimFactory,
) -> None:
    shim = await make_shim(*SHIM_ARGS, env=NO_DOCKER)
    async with shim.client() as c:
        task = await wait_status(c, (await c.submit_task(TaskSpec(id="t"))).id, TaskStatus.RUNNING)
        assert task.runner_token and task.ports.runner
        url = f"http://127.0.0.1:{task.ports.runner}"
        for token in ("nope", "another-users-guess-0123456789abcdef0123456789"):
            async with RunnerClient(url, token) as intruder:
                assert (await intruder.wait_healthy()).state is RunnerState.WAITING_SPEC
                with pytest.raises(RunnerAPIError) as e:
                    await intruder.events(0)
                assert e.value.status == 401
        # Handed over in a 0600 file, never on a command line.
        runner = psutil.Process(_runner_pid(shim, "t"))
        assert not any(task.runner_token in a for a in runner.cmdline())
        token_file = shim.state_dir / "tasks" / "t" / "runner-token"
        assert token_file.stat().st_mode & 0o077 == 0
        await c.terminate_task("t")


@pytest.mark.parametrize("how", ["sigkill", "sigstop-then-terminate", "sigstop-silent"])
async def test_a_killed_or_frozen_runner_takes_its_job_and_daemons_with_it(
    make_shim: ShimFactory, tmp_path: Path, how: str
) -> None:
    shim = await make_shim(*SHIM_ARGS, env=NO_DOCKER)
    pid_file = tmp_path / "daemon.pid"
    async with shim.client() as c:
        task, daemon = await _daemon_job(c, "victim", 1, pid_file, "stay")
        job = psutil.Process(daemon).ppid()  # the job: sleeping, in a session of its own
        assert os.getsid(job) == job != os.getsid(_runner_pid(shim, "victim"))
        runner_pid = _runner_pid(shim, "victim")
        # The shim's probe must have seen this runner answer once (its reconcile pass runs
        # every second): a runner that never answered gets the start grace (probe.py), and
        # a loaded machine could freeze it before that first answer.
        await asyncio.sleep(2.5)
        if how == "sigkill":
            os.kill(runner_pid, signal.SIGKILL)
        else:
            os.kill(runner_pid, signal.SIGSTOP)
        try:
            if how == "sigstop-then-terminate":
                await c.terminate_task("victim", timeout_s=1)
            ended = await wait_status(c, "victim", TaskStatus.TERMINATED, timeout_s=SILENCE_S + 30)
        finally:
            if _alive(runner_pid):
                os.kill(runner_pid, signal.SIGCONT)
        if how == "sigstop-silent":
            assert "stopped answering" in ended.message
        assert await _gone(job), "the job outlived its runner"
        assert await _gone(daemon), "the job's daemon outlived its runner"
        assert await _gone(runner_pid)
        assert await _held(c, "victim") == []
        # The same GPU goes to the next task only now that nothing of the last one runs.
        nxt: TaskInfo = await c.submit_task(TaskSpec(id="next", accelerators=1))
        assert nxt.accelerators == task.accelerators


async def test_terminate_lets_the_runner_record_the_jobs_end(make_shim: ShimFactory) -> None:
    """A terminate shorter than the runner's own grace: the shim has the runner stop the job
    with the terminate's grace, so the final state is written before anything is killed."""
    shim = await make_shim(*SHIM_ARGS, env=NO_DOCKER)
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        "print('ready', flush=True); time.sleep(600)"
    )
    async with shim.client() as c:
        task = await wait_status(c, (await c.submit_task(TaskSpec(id="s"))).id, TaskStatus.RUNNING)
        await start_job(task, ["python3", "-c", stubborn])
        async with runner_client(task) as runner:  # its SIGTERM ignored before it is stopped

            async def printed() -> list[str]:
                page = await runner.events(0, 1.0)
                return [e.data or "" for e in page.events if e.stream == "stdout"]

            await await_until(printed, 60, "the job ignoring SIGTERM", done=lambda out: out)
        done = await c.terminate_task("s", timeout_s=1)
    assert done.termination_reason is TerminationReason.STOPPED_BY_USER
    events, _ = EventLog(shim.state_dir / "tasks" / "s" / "runner" / "events").read(0)
    assert events[-1].state is RunnerState.TERMINATED, events[-3:]


async def test_a_runner_stopped_before_its_job_started_ends_its_task_not_started(
    make_shim: ShimFactory,
) -> None:
    """What an adopter of an unfinished placement reads when the runner is gone: its task
    ended ``not_started`` (nothing ran: place the run again), not ``stopped_by_user``."""
    shim = await make_shim(*SHIM_ARGS, env=NO_DOCKER)
    async with shim.client() as c:
        task = await wait_status(c, (await c.submit_task(TaskSpec(id="u"))).id, TaskStatus.RUNNING)
        async with runner_client(task) as runner:
            await runner.wait_healthy()
            await runner.stop(1.0)
        ended = await wait_status(c, "u", TaskStatus.TERMINATED, timeout_s=60)
    assert ended.termination_reason is TerminationReason.NOT_STARTED, ended
