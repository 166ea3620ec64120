"""What a ``tcl.jobs`` job in a project costs the runner before it starts: the directory of links
to the distributions it is lent (``tcl.runner.lend.link_dir``). The baseline, in the same run, is
the first one a process makes (it reads every distribution's metadata and file list, as each job
start did before the read was kept for the process); then each job's own.

    uv run python -m bench.runner_lend [--jobs 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tcl.jobs.deps import JOB_DEPENDENCIES
from tcl.runner import lend


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=20)
    args = ap.parse_args()
    tops = tuple(JOB_DEPENDENCIES.values())
    with tempfile.TemporaryDirectory(prefix="tcl-bench-lend-") as tmp:
        firsts, jobs = [], []
        for i in range(3):
            lend.lent_paths.cache_clear()
            t0 = time.perf_counter()
            lend.link_dir(Path(tmp) / f"first-{i}", tops)
            firsts.append(time.perf_counter() - t0)
        for i in range(args.jobs):
            t0 = time.perf_counter()
            links = lend.link_dir(Path(tmp) / f"job-{i}", tops)
            jobs.append(time.perf_counter() - t0)
        first, job = statistics.median(firsts), statistics.median(jobs)
        n = len(list(links.iterdir()))
        print(f"first link dir of a process (metadata read): {first * 1e3:.1f} ms ({n} links)")
        print(f"each job's link dir after it: median {job * 1e3:.2f} ms")
        print(f"ratio job/first: {job / first:.3f}")


if __name__ == "__main__":
    main()
