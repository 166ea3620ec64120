"""Docker executor: task submit -> runner healthcheck answers, vs ``docker run`` of the same image
to the same readiness, alternating, in the same run. The baseline container is given a bearer
token file as the shim gives its runners (a runner refuses to serve without one).

    uv run python bench/shim_docker_submit.py [ROUNDS]
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench._shimlib import (
    ShimProcess,
    free_port,
    report,
    runner_image,
    submit_until_healthy,
    wait_healthy,
)
from tcl.shim.api import TaskSpec

DOCKER = "/usr/bin/docker"
TOKEN_TARGET = "/run/tcl-bench-token"


async def docker_run_once(http: httpx.AsyncClient, image: str, token: Path, i: int) -> float:
    port = free_port()
    name = f"tcl-bench-baseline-{port}-{i}"
    t0 = time.perf_counter()
    await asyncio.to_thread(
        subprocess.run,
        [
            DOCKER,
            "run",
            "-d",
            "--rm",
            "--name",
            name,
            "--label",
            "tcl-bench=1",
            "-p",
            f"127.0.0.1:{port}:10999",
            "-v",
            f"{token}:{TOKEN_TARGET}:ro",
            "-e",
            f"TCL_RUNNER_TOKEN_FILE={TOKEN_TARGET}",
            image,
        ],
        check=True,
        capture_output=True,
    )
    await wait_healthy(http, f"http://127.0.0.1:{port}/api/healthcheck")
    elapsed = time.perf_counter() - t0
    await asyncio.to_thread(subprocess.run, [DOCKER, "rm", "-f", name], capture_output=True)
    return elapsed


async def shim_once(shim: ShimProcess, http: httpx.AsyncClient, image: str, i: int) -> float:
    spec = TaskSpec(id=f"bench-{i}", image=image)
    return await submit_until_healthy(shim, http, spec, terminate_timeout_s=1)


async def main(rounds: int) -> None:
    image = runner_image()
    shim = ShimProcess("--executor", "docker", "--reconcile-interval-s", "1")
    await shim.wait()
    shim_s: list[float] = []
    base_s: list[float] = []
    tmp = tempfile.TemporaryDirectory()
    token = Path(tmp.name) / "token"
    token.write_text(secrets.token_urlsafe(32) + "\n")
    os.chmod(token, 0o600)
    try:
        async with httpx.AsyncClient(timeout=5, trust_env=False) as http:
            await docker_run_once(http, image, token, -1)  # warm-up (page cache, docker-proxy)
            for i in range(rounds):
                base_s.append(await docker_run_once(http, image, token, i))
                shim_s.append(await shim_once(shim, http, image, i))
    finally:
        shim.close()
        tmp.cleanup()
    report("docker executor submit->runner healthy", shim_s, base_s, 1.2)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 7))
