"""Process executor: task submit -> runner healthcheck answers, vs starting ``tcl-runner serve``
by hand to the same readiness, alternating, in the same run.

    uv run python bench/shim_process_submit.py [ROUNDS]
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench._runner_util import write_token_file
from bench._shimlib import ShimProcess, free_port, report, submit_until_healthy, wait_healthy
from tcl.shim.api import TaskSpec

RUNNER = str(Path(sys.executable).with_name("tcl-runner"))


async def by_hand_once(http: httpx.AsyncClient) -> float:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="tcl-bench-runner-") as state:
        _, token_file = write_token_file(Path(state))
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [
                RUNNER,
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--state-dir",
                state,
                "--token-file",
                str(token_file),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        await wait_healthy(http, f"http://127.0.0.1:{port}/api/healthcheck")
        elapsed = time.perf_counter() - t0
        proc.terminate()
        await asyncio.to_thread(proc.wait, 30)
    return elapsed


async def shim_once(shim: ShimProcess, http: httpx.AsyncClient, i: int) -> float:
    return await submit_until_healthy(shim, http, TaskSpec(id=f"bench-{i}"), terminate_timeout_s=5)


async def main(rounds: int) -> None:
    shim = ShimProcess(
        "--executor", "process", "--runner-bin", RUNNER, "--reconcile-interval-s", "1"
    )
    await shim.wait()
    shim_s: list[float] = []
    base_s: list[float] = []
    try:
        async with httpx.AsyncClient(timeout=5, trust_env=False) as http:
            await by_hand_once(http)  # warm-up (page cache)
            for i in range(rounds):
                base_s.append(await by_hand_once(http))
                shim_s.append(await shim_once(shim, http, i))
    finally:
        shim.close()
    report("process executor submit->runner healthy", shim_s, base_s, 1.2)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 7))
