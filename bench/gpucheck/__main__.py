"""`python -m bench.gpucheck` (`scripts/gpu-check.sh`): the GPU truth table, one row a check.

Each row runs in a child process of its own (a JAX process keeps the GPU memory it took until it
exits, and the next row needs it), within its time limit and what is left of `--deadline-s`;
the table is printed as rows finish and again at the end, and written to `--out` (table.txt and
results.json) when given. Exit 0 when no row failed (a row below its goal is a measurement, not
a failure of the check).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.gpucheck.report import Outcome, RowResult, parse, table

# Row name -> (module, seconds it may take). The order is the table's.
ROWS: dict[str, tuple[str, float]] = {
    "inventory": ("bench.gpucheck.inventory", 90),
    "isolation": ("bench.gpucheck.isolation", 150),
    "checkpoint": ("bench.gpucheck.checkpoint", 150),
    "mfu": ("bench.gpucheck.mfu", 330),
    "batchsize": ("bench.gpucheck.batchsize", 300),
}


def run_one(name: str, limit_s: float) -> RowResult:
    module, _ = ROWS[name]
    t0 = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", module],
            capture_output=True,
            text=True,
            timeout=limit_s,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        out = e.stdout if isinstance(e.stdout, str) else (e.stdout or b"").decode(errors="replace")
        tail = " | ".join(out.strip().splitlines()[-2:])[-200:]
        return RowResult(
            name, Outcome.FAILED, f"timed out after {limit_s:.0f} s: {tail}", {}, limit_s
        )
    result = parse(done.stdout)
    if result is None:
        tail = " | ".join((done.stdout + done.stderr).strip().splitlines()[-3:])[-300:]
        result = RowResult(
            name,
            Outcome.FAILED,
            f"exit {done.returncode}, no result: {tail}",
            {},
            time.perf_counter() - t0,
        )
    if result.outcome is Outcome.FAILED:
        sys.stderr.write(f"--- {name} output (last 40 lines) ---\n")
        sys.stderr.write("\n".join((done.stdout + done.stderr).splitlines()[-40:]) + "\n")
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="scripts/gpu-check.sh", description=__doc__)
    p.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of {list(ROWS)}")
    p.add_argument("--deadline-s", type=float, default=450.0, help="for all rows together")
    p.add_argument("--out", type=Path, help="write table.txt and results.json here")
    a = p.parse_args(argv)
    names = [n.strip() for n in a.rows.split(",") if n.strip()]
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        p.error(f"--rows: unknown {unknown}; rows are {list(ROWS)}")
    deadline = time.monotonic() + a.deadline_s
    results: list[RowResult] = []
    for name in names:
        left = deadline - time.monotonic()
        if left < 10:
            results.append(RowResult(name, Outcome.SKIPPED, "no time left under --deadline-s"))
            continue
        result = run_one(name, min(ROWS[name][1], left))
        results.append(result)
        print(f"[{name}] {result.outcome}: {result.summary}", flush=True)
        if a.out:
            write(a.out, results)
    print()
    print(table(results), flush=True)
    if a.out:
        write(a.out, results)
    return 1 if any(r.outcome is Outcome.FAILED for r in results) else 0


def write(out: Path, results: list[RowResult]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.txt").write_text(table(results) + "\n")
    (out / "results.json").write_text(
        json.dumps([json.loads(r.to_json()) for r in results], indent=2) + "\n"
    )


if __name__ == "__main__":
    sys.exit(main())
