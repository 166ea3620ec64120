"""Log throughput: a job printing 1,000,000 lines (~100 MB) received by a WebSocket follower
of the runner, against the same job's output read straight from a pipe in the same run.

    uv run python bench/runner_log_throughput.py [--lines N]

Target: ratio (runner / pipe throughput) >= 0.5.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time

import psutil

from bench._runner_util import local_runner, start_job

BLOCK_WRITES = False  # --block-writes: the job writes 1 MB blocks (stresses the runner itself)


def job_argv(lines: int) -> list[str]:
    if BLOCK_WRITES:
        prog = (
            "import os\n"
            "pad = 'x' * 92\n"
            f"lines = [f'{{i:07d}} {{pad}}\\n' for i in range({lines})]\n"
            "for k in range(0, len(lines), 10_000):\n"
            "    data = ''.join(lines[k:k + 10_000]).encode()\n"
            "    while data:\n"
            "        data = data[os.write(1, data):]\n"
        )
    else:
        prog = (
            "import sys\n"
            "w = sys.stdout.write\n"
            "pad = 'x' * 92\n"
            f"for i in range({lines}):\n"
            "    w(f'{i:07d} {pad}\\n')\n"
        )
    return [sys.executable, "-c", prog]


def pipe_baseline(lines: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    # The same job in the same environment: the runner runs jobs with PYTHONUNBUFFERED=1.
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(job_argv(lines), stdout=subprocess.PIPE, bufsize=0, env=env)
    assert proc.stdout is not None
    total = 0
    while chunk := proc.stdout.read(65536):
        total += len(chunk)
    proc.wait()
    return time.perf_counter() - t0, total


async def through_runner(lines: int) -> tuple[float, int, int, float]:
    """Seconds, bytes received, events, and the runner process's own CPU seconds."""
    async with local_runner() as (client, proc, _):
        runner = psutil.Process(proc.pid)
        cpu0 = sum(runner.cpu_times()[:2])
        t0 = await start_job(client, job_argv(lines))
        total = 0
        events = 0
        async for e in client.follow(0):
            events += 1
            if e.stream == "stdout":
                total += len(e.data or "")
        elapsed = time.perf_counter() - t0
        return elapsed, total, events, sum(runner.cpu_times()[:2]) - cpu0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="alternate runs; best of each")
    ap.add_argument("--block-writes", action="store_true", help="job writes 1 MB blocks")
    args = ap.parse_args()
    global BLOCK_WRITES
    BLOCK_WRITES = args.block_writes
    pipe_s = runner_s = float("inf")
    for _ in range(args.repeat):  # alternating, so load changes hit both sides alike
        t, pipe_bytes = pipe_baseline(args.lines)
        pipe_s = min(pipe_s, t)
        t, runner_bytes, events, cpu_s = asyncio.run(through_runner(args.lines))
        if t < runner_s:
            runner_s, runner_cpu_s = t, cpu_s
        assert runner_bytes == pipe_bytes, (runner_bytes, pipe_bytes)
    mb = pipe_bytes / 1e6
    print(f"lines={args.lines} bytes={pipe_bytes} ({mb:.1f} MB), best of {args.repeat}")
    print(f"pipe:   {pipe_s:.2f} s  {mb / pipe_s:.1f} MB/s")
    print(f"runner: {runner_s:.2f} s  {mb / runner_s:.1f} MB/s  ({events} events over WebSocket)")
    print(f"runner process CPU: {runner_cpu_s:.2f} s ({runner_cpu_s / mb * 100:.2f} s per 100 MB)")
    print(f"ratio runner/pipe throughput: {pipe_s / runner_s:.2f}  (target >= 0.5)")


if __name__ == "__main__":
    main()
