"""The TPU worker's startup- and shutdown-scripts, run for real with bash on this machine.

The startup-script brings up a real shim (this checkout's venv, fake ``tpu-v4:4`` chips, a tmp
shim dir, the daemon path: no systemd here); a real task and job run through it; the
shutdown-script then preempts it and the job's SIGTERM trap runs (the checkpoint's stand-in).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tcl.control.backends.tpu.bootstrap import (
    WorkerBootstrap,
    render_shutdown_script,
    render_startup_script,
)
from tcl.shim.api import ExecutorKind, TaskSpec, TaskStatus, TerminationReason
from tcl.shim.client import ShimClient
from tcl.shim.errors import ShimError, Unauthorized
from tests.integration.shim.harness import cleanup_processes, free_port, start_job, wait_status

pytestmark = [pytest.mark.integration, pytest.mark.tpu]

VENV = Path(sys.executable).parent.parent  # this checkout's venv, with tcl installed


def bash(script: str, where: Path, name: str) -> float:
    path = where / name
    path.write_text(script)
    t0 = time.monotonic()
    subprocess.run(["bash", str(path)], check=False, timeout=120)
    return time.monotonic() - t0


def shim_pids(state_dir: Path) -> list[int]:
    """tcl-shim processes serving ``state_dir``."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info.get("cmdline") or []
        if any("tcl-shim" in c for c in cmd) and str(state_dir) in cmd:
            found.append(p.info["pid"])
    return found


async def healthy(url: str, token_file: Path, timeout_s: float = 60) -> tuple[ShimClient, str]:
    """A client of the shim once it answers to the token in ``token_file``, and that token (read
    at each try: the shim writes a new one when it starts, ``--new-token``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        token = token_file.read_text().strip()
        client = ShimClient(url, token)
        try:
            await client.healthcheck()
            return client, token
        except ShimError:
            await client.aclose()
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


@pytest.fixture
def shim_dir(tmp_path: Path) -> Iterator[Path]:
    d = tmp_path / "shim"
    yield d
    # Stop the shim the scripts started (by its pid file), then whatever its tasks left.
    pid_file = d / "shim.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        with contextlib.suppress(psutil.NoSuchProcess, psutil.TimeoutExpired):
            psutil.Process(pid).wait(timeout=20)
    if (d / "state" / "instance_id").exists():
        cleanup_processes((d / "state" / "instance_id").read_text().strip())


async def test_startup_script_brings_up_the_shim_and_shutdown_preempts(
    shim_dir: Path, tmp_path: Path
) -> None:
    port = free_port()
    b = WorkerBootstrap(
        tpu_chip="tpu-v4",
        shim_dir=str(shim_dir),
        shim_port=port,
        shim_venv=str(VENV),
        fake_accelerators="tpu-v4:4",
        user_startup_script=f"echo boot >> {tmp_path}/user-marker\n",
        preemption_grace_s=10,
        shutdown_wait_s=25,
    )
    url = f"http://127.0.0.1:{port}"
    startup = render_startup_script(b)

    bash(startup, tmp_path, "startup.sh")
    c, token = await healthy(url, shim_dir / "token")
    async with c:
        host = await c.host()
    assert [(a.index, a.chip) for a in host.accelerators] == [(i, "tpu-v4") for i in range(4)]

    bash(startup, tmp_path, "startup.sh")  # the next boot, or a re-run: still one shim
    old = token
    client, token = await healthy(url, shim_dir / "token")
    # ... with a new token (--new-token): whoever read the old one has nothing
    assert token != old
    async with ShimClient(url, old) as stale:
        with pytest.raises(Unauthorized):
            await stale.host()
    async with client as c:
        assert shim_pids(shim_dir / "state") == [int((shim_dir / "shim.pid").read_text())]
        assert (tmp_path / "user-marker").read_text() == "boot\nboot\n"

        task = await c.submit_task(
            TaskSpec(id="train", accelerators=2, executor=ExecutorKind.PROCESS)
        )
        task = await wait_status(c, "train", TaskStatus.RUNNING)
        marker, started = tmp_path / "checkpointed", tmp_path / "started"
        job = (
            f'trap \'echo "$TPU_VISIBLE_CHIPS $TPU_CHIPS_PER_PROCESS_BOUNDS" > {marker}; '
            f"exit 143' TERM; touch {started}; while true; do sleep 0.1; done"
        )
        await start_job(task, ["bash", "-c", job])
        for _ in range(300):
            if started.exists():
                break
            await asyncio.sleep(0.1)
        assert started.exists(), (shim_dir / "shim.log").read_text()[-2000:]

        took = bash(render_shutdown_script(b), tmp_path, "shutdown.sh")
        log = (shim_dir / "startup.log").read_text()
        assert "tcl shutdown: notified ['train']" in log and "no task running" in log, log
        assert took < 25
        assert marker.read_text() == "0,1 1,2,1\n"  # the job got its SIGTERM, saw its chips
        info = await c.get_task("train")
        assert info.status is TaskStatus.TERMINATED
        assert info.termination_reason is TerminationReason.PREEMPTED
        assert token not in log
