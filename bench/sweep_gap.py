"""Sweep GPU reuse gap: a GPU freeing -> the next queued entry starting on it.

1,000 queued entries (`--entries`) of a tiny job (it sleeps `--sleep-s`, 1 s by default) are
added with `tcl matrix add --grid i=0..N-1 --chip h100 -- python job.py {i} SLEEP` on a local
host with 8 fake h100s and the process executor, in a throwaway git repo, HOME and state dir
(`TCL_STATE_DIR`, `TCL_CONFIG`); `matrix add` starts the local `tcl serve` whose scheduler
places one run per free GPU and claims the next entry when a run ends.

The job itself records its timing: `time.time()` is the first thing its Python process does
(start), then it sleeps, then it takes its end time and appends one line (entry, GPU index from
`TCL_ACCELERATORS`, start, end) to a file in the bench's temp dir with one O_APPEND write. Per
GPU, the jobs are sorted by start; a gap is the next job's start minus the previous job's end
on that GPU (a negative one would be two jobs at once on one GPU: counted as overlaps). Every
entry must appear exactly once in those lines (missing and doubles are printed), and the
matrix's own counts must say all done.

The baseline, in the same run: the same N jobs run by a bare loop, 8 Python threads (one per
"GPU"), each running `subprocess.run([sys.executable, job.py, i, SLEEP])` back to back. Its gap
is the unavoidable cost of ending one Python process and starting the next. Printed: gap p50,
p99 and max for both, the wall time from the first start to the last end (and, for tcl, from
`matrix add`), the ratio tcl p50 / baseline p50, and whether issue 29's target (tcl p50 <
0.5 s) is met. The jobs' `python` is the baseline's interpreter (PATH: this venv's bin first).

    uv run --locked python -m bench.sweep_gap [--entries 1000] [--sleep-s 1.0] [--gpus 8]
        [--quick] [--timeout-s 3600]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench._controllib import path_with_this_python

REPO = Path(__file__).resolve().parent.parent
TCL = str(REPO / ".venv" / "bin" / "tcl")

JOB = """\
import time

t0 = time.time()
import os
import sys

time.sleep(float(sys.argv[2]))
gpu = os.environ.get("TCL_ACCELERATORS") or os.environ.get("CUDA_VISIBLE_DEVICES") or "?"
line = f"{sys.argv[1]} {gpu} {t0:.6f} {time.time():.6f}\\n"
fd = os.open(os.environ["GAP_OUT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
os.write(fd, line.encode())
os.close(fd)
"""


@dataclass(frozen=True)
class Line:
    entry: str
    gpu: str
    start: float
    end: float


@dataclass(frozen=True)
class Result:
    what: str
    lines: list[Line]
    gaps: list[float]
    overlaps: int
    missing: int
    doubles: int
    wall_s: float  # first job start -> last job end

    def pct(self, p: float) -> float:
        return percentile(self.gaps, p)


def percentile(xs: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100)."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = max(0, min(len(s) - 1, round(p / 100 * len(s) + 0.5) - 1))
    return s[k]


def read_lines(path: Path) -> list[Line]:
    if not path.exists():
        return []
    out = []
    for raw in path.read_text().splitlines():
        parts = raw.split()
        if len(parts) == 4:
            out.append(Line(parts[0], parts[1], float(parts[2]), float(parts[3])))
    return out


def analyse(what: str, lines: list[Line], entries: int) -> Result:
    by_gpu: dict[str, list[Line]] = defaultdict(list)
    for ln in lines:
        by_gpu[ln.gpu].append(ln)
    gaps: list[float] = []
    overlaps = 0
    for jobs in by_gpu.values():
        jobs.sort(key=lambda j: j.start)
        for prev, nxt in itertools.pairwise(jobs):
            g = nxt.start - prev.end
            if g < 0:
                overlaps += 1
            gaps.append(g)
    counts = Counter(ln.entry for ln in lines)
    missing = sum(1 for i in range(entries) if counts.get(str(i), 0) == 0)
    doubles = sum(n - 1 for n in counts.values() if n > 1)
    wall = max(ln.end for ln in lines) - min(ln.start for ln in lines) if lines else 0.0
    return Result(what, lines, gaps, overlaps, missing, doubles, wall)


# baseline -----------------------------------------------------------------------------------


def bench_baseline(job: Path, out: Path, entries: int, sleep_s: float, gpus: int) -> Result:
    todo = list(range(entries))
    lock = threading.Lock()

    def worker(gpu: int) -> None:
        env = {**os.environ, "GAP_OUT": str(out), "TCL_ACCELERATORS": str(gpu)}
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            subprocess.run([sys.executable, str(job), str(i), str(sleep_s)], env=env, check=True)

    threads = [threading.Thread(target=worker, args=(g,)) for g in range(gpus)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return analyse("baseline (8 threads x subprocess.run)", read_lines(out), entries)


# tcl ----------------------------------------------------------------------------------------


def tcl_env(root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": path_with_this_python(),  # the jobs' `python` is the baseline's
        "HOME": str(root / "home"),
        "TCL_STATE_DIR": str(root / "home" / "state"),
        "TCL_CONFIG": str(root / "config.yaml"),
        "NO_COLOR": "1",
    }


def matrix_counts(env: dict[str, str], cwd: Path) -> dict[str, int]:
    p = subprocess.run(
        [TCL, "matrix", "status", "gap", "--json"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    data: dict[str, Any] = json.loads(p.stdout)
    return {str(k): int(v) for k, v in data["counts"].items()}


def bench_tcl(
    root: Path, repo: Path, out: Path, entries: int, sleep_s: float, gpus: int, timeout_s: float
) -> tuple[Result, float, dict[str, int]]:
    (root / "home").mkdir()
    host = f'{{type: local, fake_accelerators: "h100:{gpus}", executor: process}}'
    (root / "config.yaml").write_text(f"hosts:\n  here: {host}\n")
    env = tcl_env(root)
    grid = "i=" + ",".join(str(i) for i in range(entries))
    argv = [
        TCL,
        "matrix",
        "add",
        "--name",
        "gap",
        "--grid",
        grid,
        "--chip",
        "h100",
        "--env",
        f"GAP_OUT={out}",
        "--",
        "python",
        "job.py",
        "{i}",
        str(sleep_s),
    ]
    t_add = time.time()
    try:
        subprocess.run(argv, env=env, cwd=repo, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"tcl matrix add failed ({e.returncode}):\n{e.stderr}") from None
    deadline = time.monotonic() + timeout_s
    next_status = time.monotonic() + 15.0
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if len(read_lines(out)) >= entries or time.monotonic() >= next_status:
            counts = matrix_counts(env, repo)
            ended = sum(counts.get(s, 0) for s in ("done", "failed", "cancelled"))
            if ended >= entries:
                break
            next_status = time.monotonic() + 15.0
    else:
        print(f"tcl: timed out after {timeout_s:.0f} s; counts {counts}", file=sys.stderr)
    lines = read_lines(out)
    since_add = max(ln.end for ln in lines) - t_add if lines else float("nan")
    return analyse("tcl matrix (local, process executor)", lines, entries), since_add, counts


def stop_daemon(root: Path, repo: Path) -> None:
    """Stop what `matrix add` started: the daemon (`tcl serve --stop`), the local shim it
    started, and any runner left behind (a process whose command line names this run's own temp
    dir, so nothing of anyone else's)."""
    from tcl.control.detached import stop_pid
    from tcl.control.localshim import stop_local_shim

    subprocess.run(
        [TCL, "serve", "--stop"],
        env=tcl_env(root),
        cwd=repo,
        capture_output=True,
        timeout=120,
        check=False,
    )
    stop_local_shim(root / "home" / "state" / "local-shim")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if str(root).encode() in cmdline:
            print(f"(stopping a leftover process {proc.name}: {cmdline[:80]!r})", file=sys.stderr)
            stop_pid(int(proc.name), grace_s=5.0)


# report -------------------------------------------------------------------------------------


def report(r: Result) -> None:
    gpus = len({ln.gpu for ln in r.lines})
    print(f"{r.what}:")
    print(
        f"  jobs run {len(r.lines)} on {gpus} GPUs; missing {r.missing}, doubles {r.doubles}, "
        f"overlaps on a GPU {r.overlaps}"
    )
    if r.gaps:
        print(
            f"  gap end->next start: p50 {r.pct(50):.3f} s  p99 {r.pct(99):.3f} s  "
            f"max {max(r.gaps):.3f} s  mean {statistics.fmean(r.gaps):.3f} s "
            f"({len(r.gaps)} gaps)"
        )
    print(f"  wall (first start -> last end): {r.wall_s:.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--entries", type=int, default=1000)
    ap.add_argument("--sleep-s", type=float, default=1.0)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="100 entries")
    ap.add_argument("--timeout-s", type=float, default=3600.0, help="give tcl up after this")
    args = ap.parse_args()
    entries = 100 if args.quick else args.entries
    root = Path(tempfile.mkdtemp(prefix="tcl-bench-gap-"))
    repo = root / "repo"
    started_daemon = False
    try:
        repo.mkdir()
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
        job = repo / "job.py"
        job.write_text(JOB)
        print(
            f"{entries} entries, a job of {args.sleep_s:g} s, {args.gpus} fake h100s "
            f"(ideal wall {entries * args.sleep_s / args.gpus:.1f} s)"
        )
        base = bench_baseline(job, root / "baseline.lines", entries, args.sleep_s, args.gpus)
        report(base)
        started_daemon = True
        tcl, since_add, counts = bench_tcl(
            root, repo, root / "tcl.lines", entries, args.sleep_s, args.gpus, args.timeout_s
        )
        report(tcl)
        print(f"  wall (matrix add -> last end): {since_add:.1f} s; matrix counts {counts}")
        ok = (
            tcl.missing == 0
            and tcl.doubles == 0
            and tcl.overlaps == 0
            and counts.get("done", 0) == entries
        )
        print(f"every entry ran exactly once, all done: {'yes' if ok else 'NO'}")
        ratio = tcl.pct(50) / base.pct(50) if base.pct(50) > 0 else float("inf")
        print(
            f"gap p50: tcl {tcl.pct(50):.3f} s vs baseline {base.pct(50):.3f} s; "
            f"p99: tcl {tcl.pct(99):.3f} s vs baseline {base.pct(99):.3f} s"
        )
        print(f"ratio tcl/baseline (p50): {ratio:.1f}x")
        met = ok and tcl.pct(50) < 0.5
        print(f"target tcl gap p50 < 0.5 s: {'met' if met else 'NOT met'}")
    finally:
        if started_daemon:
            stop_daemon(root, repo)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
