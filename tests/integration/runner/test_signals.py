"""Stop signals to a real ``tcl-runner`` process, serve and batch: the signal reaches the job,
the job's last output reaches the event log, the final state is written, and only then does
the runner exit (143). Waits below are generous limits, never measurements."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tcl.runner.api import Event, JobSpec, LogStream, RunnerState
from tcl.runner.client import RunnerClient
from tcl.runner.events import EventLog
from tests.unit.runner.conftest import PY, TOKEN

from .test_batch import RUNNER, write_spec, write_token

S = RunnerState
LIMIT_S = 60.0

# Checkpoints on SIGTERM or SIGUSR1: says which signal it got, takes a while, exits 0.
CHECKPOINTING = """
import os, signal, sys, time
print("pids", os.getpid(), flush=True)
def checkpoint(sig, _):
    print("got", signal.Signals(sig).name, flush=True)
    time.sleep(1)
    print("checkpoint saved", flush=True)
    sys.exit(0)
for s in (signal.SIGTERM, signal.SIGUSR1):
    signal.signal(s, checkpoint)
print("ready", flush=True)
time.sleep(600)
"""

# Ignores SIGTERM, and so does the child it starts in its process group.
STUBBORN = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("pids", os.getpid(), child.pid, flush=True)
print("ready", flush=True)
time.sleep(600)
"""


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    state = tmp_path / "state"
    yield state
    # Hygiene where the runner failed: end the job processes this test started (a pid that
    # has been reused since is left alone: its command line is not one of ours).
    for pid in pids_of(read_events(state)):
        with contextlib.suppress(OSError):
            if "time.sleep(600)" in Path(f"/proc/{pid}/cmdline").read_text():
                os.kill(pid, signal.SIGKILL)


def alive(pid: int) -> bool:
    """True while ``pid`` is a live process (a zombie waiting for its reaper is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def read_events(state_dir: Path) -> list[Event]:
    """Every event so far, read as text: an ``EventLog`` would repair a live log's tail."""
    path = state_dir / "events" / "events.jsonl"
    if not path.exists():
        return []
    lines = path.read_bytes().split(b"\n")[:-1]
    return [Event.model_validate_json(line) for line in lines]


def stdout_of(events: list[Event]) -> str:
    return "".join(e.data or "" for e in events if e.stream is LogStream.STDOUT)


def said(events: list[Event]) -> list[str]:
    """The job's stdout lines after its pids."""
    return [line for line in stdout_of(events).splitlines() if not line.startswith("pids ")]


async def until_printed(state_dir: Path, text: str) -> list[Event]:
    async with asyncio.timeout(LIMIT_S):
        while text not in stdout_of(events := read_events(state_dir)):
            await asyncio.sleep(0.05)
    return events


@contextlib.asynccontextmanager
async def runner_process(*args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    proc = await asyncio.create_subprocess_exec(*RUNNER, *args)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path, *extra: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    port_file = tmp_path / "port"
    args = ["serve", "--port", "0", "--port-file", str(port_file)]
    args += ["--token-file", str(write_token(tmp_path))]
    async with runner_process(*args, "--state-dir", str(tmp_path / "state"), *extra) as proc:
        async with asyncio.timeout(LIMIT_S):
            while not port_file.exists():
                await asyncio.sleep(0.05)
        yield proc, f"http://127.0.0.1:{port_file.read_text().strip()}"


async def start_job(url: str, prog: str) -> None:
    async with RunnerClient(url, TOKEN) as client:
        await client.wait_healthy()
        await client.submit(JobSpec(run_id="sig", argv=[PY, "-c", prog]))
        await client.run()


def pids_of(events: list[Event]) -> list[int]:
    for line in stdout_of(events).splitlines():
        if line.startswith("pids "):
            return [int(p) for p in line.split()[1:]]
    return []


async def test_serve_sigterm_waits_for_the_jobs_checkpoint(tmp_path: Path, state_dir: Path) -> None:
    async with serving(tmp_path, "--stop-grace-s", "60") as (proc, url):
        await start_job(url, CHECKPOINTING)
        await until_printed(state_dir, "ready\n")
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), LIMIT_S)
    events, _ = EventLog(state_dir / "events").read(0)
    assert said(events) == ["ready", "got SIGTERM", "checkpoint saved"]
    assert (events[-1].state, events[-1].exit_code) == (S.TERMINATED, 0)
    assert code == 143


async def test_serve_sigkills_a_job_that_ignores_sigterm_after_the_grace(
    tmp_path: Path, state_dir: Path
) -> None:
    async with serving(tmp_path, "--stop-grace-s", "0.5") as (proc, url):
        await start_job(url, STUBBORN)
        pids = pids_of(await until_printed(state_dir, "ready\n"))
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), LIMIT_S)
    events = read_events(state_dir)
    assert (events[-1].state, events[-1].exit_code) == (S.TERMINATED, 128 + signal.SIGKILL)
    assert "grace period over" in "".join(e.data or "" for e in events)
    assert code == 143
    assert len(pids) == 2 and not any(alive(pid) for pid in pids)


async def test_serve_sigterm_before_any_job_terminates_at_once(
    tmp_path: Path, state_dir: Path
) -> None:
    async with serving(tmp_path) as (proc, url):
        async with RunnerClient(url, TOKEN) as client:
            await client.wait_healthy()
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), LIMIT_S)
    assert read_events(state_dir)[-1].state is S.TERMINATED
    assert code == 143


def batch_args(tmp_path: Path, state_dir: Path, prog: str, grace_s: float) -> list[str]:
    spec = write_spec(tmp_path, JobSpec(run_id="b", argv=[PY, "-c", prog]))
    grace = ["--stop-grace-s", str(grace_s)]
    return ["batch", "--spec", str(spec), "--state-dir", str(state_dir), *grace]


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGTERM])
async def test_batch_forwards_the_signal_and_records_the_checkpoint(
    tmp_path: Path, state_dir: Path, sig: signal.Signals
) -> None:
    async with runner_process(*batch_args(tmp_path, state_dir, CHECKPOINTING, 60)) as proc:
        await until_printed(state_dir, "ready\n")
        proc.send_signal(sig)
        code = await asyncio.wait_for(proc.wait(), LIMIT_S)
    events, _ = EventLog(state_dir / "events").read(0)
    assert said(events) == ["ready", f"got {sig.name}", "checkpoint saved"]
    assert (events[-1].state, events[-1].exit_code) == (S.TERMINATED, 0)
    status = json.loads((state_dir / "status.json").read_text())
    assert (status["state"], status["exit_code"]) == ("terminated", 0)
    assert code == 143


async def test_batch_sigkills_a_job_that_ignores_sigterm(tmp_path: Path, state_dir: Path) -> None:
    async with runner_process(*batch_args(tmp_path, state_dir, STUBBORN, 0.5)) as proc:
        pids = pids_of(await until_printed(state_dir, "ready\n"))
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), LIMIT_S)
    status = json.loads((state_dir / "status.json").read_text())
    assert (status["state"], status["exit_code"]) == ("terminated", 128 + signal.SIGKILL)
    assert code == 143
    assert len(pids) == 2 and not any(alive(pid) for pid in pids)


async def test_serve_ends_a_run_whose_job_never_came(tmp_path: Path, state_dir: Path) -> None:
    """The submit that started this runner died before sending its job: the runner does not
    wait forever (its task would hold accelerators); the shim's probe sees it final."""
    async with serving(tmp_path, "--start-timeout-s", "0.5") as (proc, url):
        async with RunnerClient(url, TOKEN) as client:
            await client.wait_healthy()
            async with asyncio.timeout(LIMIT_S):
                while (await client.healthcheck()).state is not S.TERMINATED:
                    await asyncio.sleep(0.05)
        assert proc.returncode is None  # it still serves: the shim reads the outcome
    assert "no job started within 0.5 s" in "".join(e.data or "" for e in read_events(state_dir))
