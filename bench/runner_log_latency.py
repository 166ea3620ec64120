"""Log latency: line printed -> line received by a WebSocket follower of the runner, p50 and
p99, against the same job's lines read straight from a pipe in the same run.

    uv run python bench/runner_log_latency.py [--lines N] [--interval-ms MS]

Each line carries the wall-clock time it was printed at (same machine, same clock).
Target: p50 < 5 ms on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

from bench._runner_util import local_runner
from tcl.runner.api import JobSpec


def job_argv(lines: int, interval_s: float) -> list[str]:
    prog = (
        "import time\n"
        f"for i in range({lines}):\n"
        "    print(f'{time.time():.6f} {i}', flush=True)\n"
        f"    time.sleep({interval_s})\n"
    )
    return [sys.executable, "-c", prog]


def percentiles(samples_s: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(samples_s, n=100, method="inclusive")
    return q[49] * 1e3, q[98] * 1e3


def pipe_baseline(argv: list[str]) -> list[float]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, env=env, bufsize=0)
    assert proc.stdout is not None
    latencies = []
    for line in proc.stdout:
        latencies.append(time.time() - float(line.split()[0]))
    proc.wait()
    return latencies


async def through_runner(argv: list[str]) -> list[float]:
    latencies: list[float] = []
    async with local_runner() as (client, _, _):
        await client.submit(JobSpec(run_id="bench", argv=argv))
        connected = asyncio.Event()

        async def follow() -> None:
            async for e in client.follow(0):
                now = time.time()
                connected.set()  # the first (state) events arrive as soon as it is connected
                if e.stream == "stdout" and e.data:
                    latencies.extend(now - float(ln.split()[0]) for ln in e.data.splitlines())

        follower = asyncio.create_task(follow())
        await connected.wait()  # follow first, then start: connect time is not log latency
        await client.run()
        await follower
    return latencies


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1000)
    ap.add_argument("--interval-ms", type=float, default=5.0)
    args = ap.parse_args()
    argv = job_argv(args.lines, args.interval_ms / 1e3)
    pipe = pipe_baseline(argv)
    runner = asyncio.run(through_runner(argv))
    assert len(runner) == len(pipe) == args.lines
    p50p, p99p = percentiles(pipe)
    p50r, p99r = percentiles(runner)
    print(f"lines={args.lines} interval={args.interval_ms} ms")
    print(f"pipe:   p50 {p50p:.2f} ms  p99 {p99p:.2f} ms")
    print(f"runner: p50 {p50r:.2f} ms  p99 {p99r:.2f} ms  (printed -> WebSocket follower)")
    print(
        f"added by the runner: p50 {p50r - p50p:.2f} ms, p99 {p99r - p99p:.2f} ms; "
        f"ratio p50 runner/pipe {p50r / p50p:.1f}  (target p50 < 5 ms)"
    )


if __name__ == "__main__":
    main()
