"""How soon a finished job's accelerators are free again, with no client connected.

A job holding all 8 (fake) GPUs prints a line and exits; nobody follows it. Measured: from the
runner's own record of the job's end (its last event's timestamp) to the moment the shim's
``/api/host`` shows the 8 GPUs free. Baseline, in the same run: the same shim answering an
explicit terminate of a running task (what a client had to do before the shim freed
accelerators by itself). The reconcile interval is the floor of the first; the ratio says how
close the shim comes to it.

    uv run python bench/shim_release_latency.py [ROUNDS] [RECONCILE_INTERVAL_S]
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from bench._shimlib import ShimProcess
from tcl.runner.api import JobSpec
from tcl.runner.client import RunnerClient
from tcl.shim.api import TaskInfo, TaskSpec, TaskStatus
from tcl.shim.client import ShimClient


async def running(c: ShimClient, task_id: str, chips: int) -> TaskInfo:
    await c.submit_task(TaskSpec(id=task_id, accelerators=chips))
    while (info := await c.get_task(task_id)).status is not TaskStatus.RUNNING:
        await asyncio.sleep(0.01)
    return info


async def free_after_job_end(c: ShimClient, i: int) -> float:
    info = await running(c, f"job-{i}", 8)
    assert info.ports.runner and info.runner_token
    async with RunnerClient(f"http://127.0.0.1:{info.ports.runner}", info.runner_token) as r:
        await r.wait_healthy()
        await r.submit(JobSpec(run_id=f"r{i}", argv=["python3", "-c", "print('done')"]))
        await r.run()
        page = await r.events(0, wait_s=30)
        while not page.state.is_final:
            page = await r.events(page.next, wait_s=30)
        ended_at = (await r.events(0, limit=10_000)).events[-1].ts
    while any(a.task_id for a in (await c.host()).accelerators):
        await asyncio.sleep(0.005)
    freed = time.time() - ended_at
    await c.remove_task(f"job-{i}")
    return freed


async def free_after_terminate(c: ShimClient, i: int) -> float:
    await running(c, f"term-{i}", 8)
    t0 = time.perf_counter()
    await c.terminate_task(f"term-{i}", timeout_s=5)
    elapsed = time.perf_counter() - t0
    await c.remove_task(f"term-{i}")
    return elapsed


async def main(rounds: int, interval_s: float) -> None:
    shim = ShimProcess(
        "--executor",
        "process",
        "--fake-accelerators",
        "h100:8",
        "--reconcile-interval-s",
        str(interval_s),
    )
    try:
        await shim.wait()
        async with shim.client() as c:
            by_itself, by_terminate = [], []
            for i in range(rounds):
                by_itself.append(await free_after_job_end(c, i))
                by_terminate.append(await free_after_terminate(c, i))
    finally:
        shim.close()
    a, b = statistics.median(by_itself), statistics.median(by_terminate)
    print(f"reconcile interval {interval_s * 1e3:.0f} ms, {rounds} rounds")
    for what, med, runs in (
        ("job end -> GPUs free, no client:", a, by_itself),
        ("explicit terminate -> GPUs free:", b, by_terminate),
    ):
        print(f"{what:34} median {med * 1e3:.0f} ms  {[round(x * 1e3) for x in runs]}")
    print(f"ratio no-client / terminate = {a / b:.2f}; no-client / interval = {a / interval_s:.2f}")


if __name__ == "__main__":
    asyncio.run(
        main(
            int(sys.argv[1]) if len(sys.argv) > 1 else 5,
            float(sys.argv[2]) if len(sys.argv) > 2 else 1.0,
        )
    )
