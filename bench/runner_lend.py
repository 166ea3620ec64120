"""What a ``tcl.jobs`` job in a project costs the runner before it starts: the directory of links
to the distributions it is lent (``tcl.runner.lend.link_dir``). The baseline, in the same run, is
the first one a process makes (it reads every distribution's metadata and file list, as each job
start did before the read was kept for the process); then each job's own.

That first read is also every runner fork server's start (it reads it before it forks any
runner), run under coverage for every shim the tests start. Its file lists: read from each
``RECORD``'s text now, against ``dist.files`` (one ``PackagePath`` a file, as before), the
baseline, in the same run: ``ratio top-level read``.

    uv run python -m bench.runner_lend [--jobs 20]
"""

from __future__ import annotations

import argparse
import importlib.metadata
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
    dists = lend.distributions_needed(tops)
    listed, recorded = [], []
    for _ in range(5):
        t0 = time.perf_counter()
        old = [listed_tops(d) for d in dists]
        listed.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        new = [lend._top_level(d) for d in dists]
        recorded.append(time.perf_counter() - t0)
        assert new == old
    was, now = statistics.median(listed), statistics.median(recorded)
    print(f"top-level paths of {len(dists)} distributions: from dist.files {was * 1e3:.1f} ms")
    print(f"from RECORD's text: {now * 1e3:.1f} ms")
    print(f"ratio top-level read: {now / was:.3f}")


def listed_tops(dist: importlib.metadata.Distribution) -> set[Path]:
    """The baseline: each file of ``dist.files`` as a ``PackagePath``, its first part kept."""
    out = set()
    for f in dist.files or []:
        top = Path(str(f)).parts[0]
        if top in ("..", "__pycache__") or top.endswith((".dist-info", ".data", ".pth")):
            continue
        out.add(Path(str(dist.locate_file(top))))
    return out


if __name__ == "__main__":
    main()
