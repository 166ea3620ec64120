"""Issue 29's table in one command: each row's benchmark run ``--rounds`` times (in turns, so a
slow spell of the machine falls on every row alike), its figure taken from what it prints
(each figure is itself a ratio against a baseline measured in the same run, or the absolute
figure the goal names), and the table printed: min, median, the goal, met or not.

    uv run --locked python -m bench.issue29 [--rounds 3] [--only local,gap] [--burners 6]
        [--out DIR]

``--burners N`` runs N busy loops (``python3 -c "while True: pass"``) for the whole table: the
run under load. Each benchmark's whole output is kept under ``--out`` (default: a new temporary
directory, printed). A benchmark that fails is shown as such with its last lines; the others go
on.
"""

from __future__ import annotations

import argparse
import operator
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Figure:
    what: str
    pattern: str  # its first group is the figure
    goal: float
    met: Callable[[float, float], bool]  # (figure, goal)

    @property
    def goal_text(self) -> str:
        return (
            "<= " if self.met is operator.le else ">= " if self.met is operator.ge else "< "
        ) + (f"{self.goal:g}")


@dataclass(frozen=True)
class Row:
    key: str
    module: str
    args: tuple[str, ...]
    figures: tuple[Figure, ...]


LE, GE, LT = operator.le, operator.ge, operator.lt
ROWS = (
    Row(
        "local",
        "bench.local_submit_latency",
        ("--reps", "7"),
        (
            Figure(
                "warm submit -> first line, local (x python -c)",
                r"ratio tcl/baseline: ([\d.]+)",
                10,
                LE,
            ),
            Figure(
                "a submit's CLI-side CPU overhead (ms)", r"CLI-side overhead: (-?\d+) ms", 100, LE
            ),
        ),
    ),
    Row(
        "ssh-process",
        "bench.control_submit_latency",
        ("--executor", "process", "--reps", "5"),
        (
            Figure(
                "warm submit -> first line, SSH, process (x ssh python -c)",
                r"ratio tcl/baseline: ([\d.]+)",
                1.5,
                LE,
            ),
        ),
    ),
    Row(
        "ssh-docker",
        "bench.control_submit_latency",
        ("--executor", "docker", "--reps", "5"),
        (
            Figure(
                "warm submit -> first line, SSH, docker (x ssh docker run)",
                r"ratio tcl/baseline: ([\d.]+)",
                1.3,
                LE,
            ),
        ),
    ),
    Row(
        "slurm",
        "bench.slurm_submit_latency",
        ("--reps", "5"),
        (
            Figure(
                "warm submit -> first line, SLURM (x sbatch --wrap)",
                r"^ratio ([\d.]+) \(target",
                2,
                LE,
            ),
        ),
    ),
    Row(
        "gap",
        "bench.sweep_gap",
        ("--entries", "240"),
        (Figure("sweep gap end -> next start, p50 (s)", r"gap p50: tcl ([\d.]+) s", 0.5, LT),),
    ),
    Row(
        "drain",
        "bench.seed002_sweep",
        (),
        (
            Figure(
                "400 seed-002 jobs on 8 GPUs, drain (x bare loop)",
                r"ratio tcl/bare-loop drain: ([\d.]+)",
                1.2,
                LE,
            ),
        ),
    ),
    Row(
        "claims",
        "bench.sweep_claims",
        ("--entries", "1000"),
        (
            Figure(
                "claims/s at 1,000 entries, SQLite (x flock+JSON)",
                r"tcl sqlite:.*ratio tcl/flock\s+([\d.]+)x",
                50,
                GE,
            ),
            Figure(
                "claims/s at 1,000 entries, PostgreSQL (x flock+JSON)",
                r"tcl postgresql:.*ratio tcl/flock\s+([\d.]+)x",
                50,
                GE,
            ),
        ),
    ),
    Row(
        "ship",
        "bench.control_resubmit",
        ("--reps", "3"),
        (
            Figure(
                "first submit, 200 MB / 20k files (x tar over ssh)",
                r"ratio first submit / copy over ssh: ([\d.]+)",
                1.5,
                LE,
            ),
            Figure(
                "re-submit unchanged (x its first submit)",
                r"ratio second/first: ([\d.]+)",
                0.05,
                LE,
            ),
        ),
    ),
    Row(
        "logs",
        "bench.follow_log",
        ("--reps", "3"),
        (
            Figure(
                "log throughput at the workstation (x ssh | cat)",
                r"ratio throughput tcl/ssh: ([\d.]+)",
                0.9,
                GE,
            ),
            Figure("log latency p50 (ms)", r"latency tcl submit: p50 ([\d.]+) ms", 5, LE),
            Figure(
                "log latency p99 (ms)",
                r"latency tcl submit: p50 [\d.]+ ms\s+p99 ([\d.]+) ms",
                20,
                LE,
            ),
        ),
    ),
    Row(
        "version",
        "bench.cli_startup",
        ("--reps", "15"),
        (
            Figure(
                "tcl --version (x python -c pass)",
                r"ratio tcl --version / python -c pass: ([\d.]+)",
                1.5,
                LE,
            ),
        ),
    ),
)


@contextmanager
def burners(n: int) -> Iterator[None]:
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def figures_of(row: Row, text: str) -> dict[str, float]:
    """The row's figures in its benchmark's output (one it did not print is left out)."""
    found: dict[str, float] = {}
    for fig in row.figures:
        m = re.search(fig.pattern, text, re.MULTILINE)
        if m is not None:
            found[fig.what] = float(m.group(1))
    return found


def run_row(row: Row, out: Path, round_: int) -> tuple[dict[str, float], str]:
    """The row's figures from one run of its benchmark (none if it failed) and what it said."""
    log = out / f"{row.key}.{round_}.log"
    t0 = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.run(
            [sys.executable, "-m", row.module, *row.args],
            cwd=ROOT,
            stdout=f,
            stderr=subprocess.STDOUT,
            check=False,
        )
    text = log.read_text(errors="replace")
    took = f"{time.monotonic() - t0:.0f} s"
    if proc.returncode != 0:
        tail = " | ".join(text.strip().splitlines()[-3:])
        return {}, f"{row.key} round {round_}: exit {proc.returncode} after {took}: {tail}"
    found = figures_of(row, text)
    shown = ", ".join(f"{v:g}" for v in found.values())
    return found, f"{row.key} round {round_}: {shown} ({took}; {log})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--only", default="", help="row keys, comma-separated: " + ",".join(r.key for r in ROWS)
    )
    ap.add_argument("--burners", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    keys = [k for k in args.only.split(",") if k]
    unknown = sorted(set(keys) - {r.key for r in ROWS})
    if unknown:
        ap.error(f"--only: no row {', '.join(unknown)}")
    rows = [r for r in ROWS if not keys or r.key in keys]
    out = args.out or Path(tempfile.mkdtemp(prefix="tcl-issue29-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"outputs in {out}; {args.rounds} rounds; {args.burners} burners", flush=True)
    seen: dict[str, list[float]] = {f.what: [] for r in rows for f in r.figures}
    with burners(args.burners):
        for round_ in range(1, args.rounds + 1):
            for row in rows:
                found, said = run_row(row, out, round_)
                print(said, flush=True)
                for what, value in found.items():
                    seen[what].append(value)
    print()
    print("| row | goal | runs | min | median | met (median) |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        for fig in row.figures:
            values = seen[fig.what]
            if not values:
                print(f"| {fig.what} | {fig.goal_text} | 0 | | | failed |")
                continue
            med = statistics.median(values)
            runs = " / ".join(f"{v:g}" for v in values)
            met = "yes" if fig.met(med, fig.goal) else "no"
            print(f"| {fig.what} | {fig.goal_text} | {runs} | {min(values):g} | {med:g} | {met} |")


if __name__ == "__main__":
    main()
