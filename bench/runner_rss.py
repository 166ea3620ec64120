"""Runner memory while a 500 MB log is written and read: a job prints 500 MB, a WebSocket
follower reads all of it; the runner process's RSS is sampled throughout, against the same
runner's RSS when idle (measured in the same run, before the job starts).

    uv run python bench/runner_rss.py [--mb 500]

Target: peak RSS < 150 MB.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time

import psutil

from bench._runner_util import local_runner, start_job


def job_argv(megabytes: int) -> list[str]:
    prog = (
        "import sys\n"
        "w = sys.stdout.write\n"
        "pad = 'y' * 92\n"
        f"for i in range({megabytes} * 10_000):\n"
        "    w(f'{i:07d} {pad}\\n')\n"
    )
    return [sys.executable, "-c", prog]


async def measure(megabytes: int) -> tuple[float, float, int, float]:
    async with local_runner() as (client, proc, _state):
        runner = psutil.Process(proc.pid)
        idle_mb = runner.memory_info().rss / 1e6
        peak = [idle_mb]
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], runner.memory_info().rss / 1e6)
                time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t0 = await start_job(client, job_argv(megabytes))
        received = 0
        async for e in client.follow(0):
            received += len(e.data or "") if e.stream == "stdout" else 0
        elapsed = time.perf_counter() - t0
        done.set()
        sampler.join()
        return idle_mb, peak[0], received, elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=500)
    args = ap.parse_args()
    idle_mb, peak_mb, received, elapsed = asyncio.run(measure(args.mb))
    print(f"log written and followed: {received / 1e6:.0f} MB in {elapsed:.1f} s")
    print(f"runner RSS idle: {idle_mb:.1f} MB, peak while logging: {peak_mb:.1f} MB")
    print(f"ratio peak/idle: {peak_mb / idle_mb:.2f}  (target peak < 150 MB)")


if __name__ == "__main__":
    main()
