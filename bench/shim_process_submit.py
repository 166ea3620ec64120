"""Process executor: task submit -> runner healthcheck answers, vs starting ``tcl-runner serve``
by hand to the same readiness, alternating, in the same run; for a shim whose runners are forked
from its runner fork server (the default) and one with ``--no-runner-forkserver`` (each runner a
new process). Also printed: the CPU each runner used until it answered (what bounds a sweep on
a small host).

    uv run python bench/shim_process_submit.py [ROUNDS]
"""

from __future__ import annotations

import asyncio
import functools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

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


def _record_cpu(into: list[float], shim: ShimProcess, task_id: str) -> None:
    """The CPU the task's runner (its wrapper's one child) has used so far, in ms."""
    task = json.loads((shim.dir / "state" / "tasks" / task_id / "task.json").read_text())
    [runner] = psutil.Process(task["handle"]["pid"]).children()
    t = runner.cpu_times()
    into.append((t.user + t.system) * 1000)


async def main(rounds: int) -> None:
    args = ("--executor", "process", "--runner-bin", RUNNER, "--reconcile-interval-s", "1")
    forked, cold = ShimProcess(*args), ShimProcess(*args, "--no-runner-forkserver")
    await forked.wait()
    await cold.wait()
    await asyncio.sleep(1)  # the fork server's imports, done while nobody waits
    times: dict[str, list[float]] = {"forked": [], "cold": [], "by hand": []}
    cpu: dict[str, list[float]] = {"forked": [], "cold": []}
    try:
        async with httpx.AsyncClient(timeout=5, trust_env=False) as http:
            await by_hand_once(http)  # warm-up (page cache)
            for i in range(rounds):
                times["by hand"].append(await by_hand_once(http))
                for label, shim in (("forked", forked), ("cold", cold)):
                    task_id = f"bench-{i}"
                    used = functools.partial(_record_cpu, cpu[label], shim, task_id)
                    times[label].append(
                        await submit_until_healthy(
                            shim, http, TaskSpec(id=task_id), terminate_timeout_s=5, then=used
                        )
                    )
    finally:
        forked.close()
        cold.close()
    report("forked runner: submit->runner healthy", times["forked"], times["by hand"], 1.2)
    report("cold runner:   submit->runner healthy", times["cold"], times["by hand"], 1.2)
    f, c = statistics.median(times["forked"]), statistics.median(times["cold"])
    print(f"ratio forked/cold (submit->healthy): {f / c:.2f}")
    fc, cc = statistics.median(cpu["forked"]), statistics.median(cpu["cold"])
    print(f"runner CPU until healthy: forked {fc:.0f} ms, cold {cc:.0f} ms")
    print(f"ratio forked/cold (runner CPU): {fc / max(cc, 1):.2f}")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 7))
