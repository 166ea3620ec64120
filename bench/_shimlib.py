"""Shared helpers for the shim benchmarks (not a benchmark itself)."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tcl.shim.api import TaskSpec, TaskStatus  # noqa: E402
from tcl.shim.client import ShimClient  # noqa: E402
from tcl.shim.errors import ShimUnavailable  # noqa: E402

TOKEN = "bench-token-0123456789abcdef0123456789abcdef"  # >= 256 bits (tcl-shim checks)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def runner_image() -> str:
    """The runner image of this checkout (built like tests/testbed.py does, if missing)."""
    from tests.testbed import BASE_IMAGE, DOCKER_CLI, runner_image_tag

    tag = runner_image_tag()
    probe = subprocess.run([DOCKER_CLI, "image", "inspect", tag], capture_output=True, check=False)
    if probe.returncode != 0:
        subprocess.run(
            ["bash", str(REPO / "scripts/testbed/base-image.sh")],
            check=True,
            env={**os.environ, "IMAGE": BASE_IMAGE},
            capture_output=True,
        )
        subprocess.run(
            [
                DOCKER_CLI,
                "build",
                "-q",
                "--force-rm",
                "--build-arg",
                f"BASE_IMAGE={BASE_IMAGE}",
                "-f",
                str(REPO / "Dockerfile.runner"),
                "-t",
                tag,
                str(REPO),
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "DOCKER_BUILDKIT": "1"},
        )
    return tag


class ShimProcess:
    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="tcl-bench-shim-"))
        self.port = free_port()
        token_file = self.dir / "token"
        token_file.write_text(TOKEN)
        token_file.chmod(0o600)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tcl.shim.main",
                "--port",
                str(self.port),
                "--state-dir",
                str(self.dir / "state"),
                "--token-file",
                str(token_file),
                "--log-level",
                "warning",
                *args,
            ],
            env={**os.environ, **(env or {})},
            cwd=REPO,
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, **kw: object) -> ShimClient:
        return ShimClient(self.url, TOKEN, **kw)  # type: ignore[arg-type]

    async def wait(self) -> None:
        async with self.client() as c:
            for _ in range(600):
                try:
                    await c.healthcheck()
                    return
                except ShimUnavailable:
                    await asyncio.sleep(0.05)
        raise RuntimeError("shim did not start")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


async def wait_healthy(http: httpx.AsyncClient, url: str, timeout_s: float = 60) -> None:
    deadline = time.perf_counter() + timeout_s
    while True:
        try:
            r = await http.get(url)
            if r.status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.perf_counter() > deadline:
            raise RuntimeError(f"{url} never answered")
        await asyncio.sleep(0.01)


async def submit_until_healthy(
    shim: ShimProcess,
    http: httpx.AsyncClient,
    spec: TaskSpec,
    terminate_timeout_s: float,
    then: Callable[[], object] | None = None,
) -> float:
    """Seconds from submitting ``spec`` until its runner answers its healthcheck; then (not
    timed) ``then`` is called and the task terminated and removed."""
    async with shim.client() as c:
        t0 = time.perf_counter()
        await c.submit_task(spec)
        while True:
            info = await c.get_task(spec.id)
            if info.status is TaskStatus.RUNNING and info.ports.runner:
                break
            if info.status is TaskStatus.TERMINATED:
                raise RuntimeError(info.message)
            await asyncio.sleep(0.01)
        await wait_healthy(http, f"http://127.0.0.1:{info.ports.runner}/api/healthcheck")
        elapsed = time.perf_counter() - t0
        if then is not None:
            then()
        await c.terminate_task(spec.id, timeout_s=terminate_timeout_s)
        await c.remove_task(spec.id)
        return elapsed


def report(name: str, shim_s: list[float], base_s: list[float], target: float) -> None:
    ms, mb = statistics.median(shim_s), statistics.median(base_s)
    print(
        f"{name}: shim median {ms * 1000:.0f} ms (runs {[round(x * 1000) for x in shim_s]}), "
        f"baseline median {mb * 1000:.0f} ms (runs {[round(x * 1000) for x in base_s]})"
    )
    print(f"ratio shim/baseline = {ms / mb:.2f} (target <= {target})")
