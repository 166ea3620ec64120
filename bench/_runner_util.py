"""Shared by the runner benchmarks: start a local runner process, run a job through its API."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from tcl.runner.api import JobSpec
from tcl.runner.client import RunnerClient


def write_token_file(folder: Path) -> tuple[str, Path]:
    """A fresh bearer token in a 0600 file (what the shim hands each runner)."""
    token = secrets.token_urlsafe(32)
    path = folder / "runner-token"
    path.write_text(token)
    path.chmod(0o600)
    return token, path


@contextlib.asynccontextmanager
async def local_runner() -> AsyncIterator[tuple[RunnerClient, subprocess.Popen[bytes], Path]]:
    """A ``tcl-runner serve`` child process on a free loopback port, and a client for it."""
    with tempfile.TemporaryDirectory(prefix="tcl-bench-runner-") as tmp:
        state = Path(tmp) / "state"
        port_file = Path(tmp) / "port"
        token, token_file = write_token_file(Path(tmp))
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tcl.runner.main",
                "serve",
                "--port",
                "0",
                "--port-file",
                str(port_file),
                "--state-dir",
                str(state),
                "--token-file",
                str(token_file),
            ],
        )
        try:
            while not port_file.exists():
                await asyncio.sleep(0.01)
            port = int(port_file.read_text())
            async with RunnerClient(f"http://127.0.0.1:{port}", token, timeout_s=120) as client:
                await client.wait_healthy(timeout_s=30)
                yield client, proc, state
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def start_job(client: RunnerClient, argv: list[str]) -> float:
    await client.submit(JobSpec(run_id="bench", argv=argv))
    t0 = time.perf_counter()
    await client.run()
    return t0
