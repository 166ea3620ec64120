"""The CLI's own start: `tcl --version` and a command's `--help` (its module mounted, flags
parsed, nothing sent) against `python -c pass` from the same venv, interleaved in one run
(median of N each), and where a command's imports go (`python -X importtime`). Also what a
`tcl serve` start imports (its app and controller: on the path of a submit that finds no
daemon), against the same bare interpreter.

    uv run python bench/cli_startup.py [--reps 15]

Targets (issue 29): `tcl --version` <= 1.5x the bare interpreter; a submit's CLI-side
overhead (its `--help` less the bare interpreter) <= 100 ms.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

TCL = str(Path(sys.executable).with_name("tcl"))


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "COLUMNS": "80"})
    return time.perf_counter() - t0


def top_imports(code: str, n: int) -> list[tuple[int, str]]:
    """The ``n`` top-level imports of ``code`` that took longest (cumulative microseconds)."""
    res = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True
    )
    rows = []
    for line in res.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\s*)(\S+)", line)
        if m and len(m.group(2)) <= 2:  # the code's own imports and theirs, one level down
            rows.append((int(m.group(1)), m.group(2) + m.group(3)))
    return sorted(rows, reverse=True)[:n]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "tcl --version": [TCL, "--version"],
        "tcl submit --help": [TCL, "submit", "--help"],
        "tcl ps --help": [TCL, "ps", "--help"],
        "tcl --help (every command)": [TCL, "--help"],
        "tcl serve's imports": [sys.executable, "-c", "from tcl.control.daemon import server, app"],
    }
    for argv in cases.values():  # warm-up: page cache, bytecode
        timed(argv)
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(args.reps):
        for name, argv in cases.items():
            times[name].append(timed(argv))
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["python -c pass"]
    for name, m in med.items():
        print(f"{name:<28} median {m * 1000:7.1f} ms  min {min(times[name]) * 1000:7.1f} ms")
    print(
        f"ratio tcl --version / python -c pass: {med['tcl --version'] / base:.2f} (target <= 1.5)"
    )
    over = med["tcl submit --help"] - base
    print(f"submit's CLI-side overhead: {over * 1000:.0f} ms (target <= 100 ms)")
    print(f"ratio tcl submit --help / python -c pass: {med['tcl submit --help'] / base:.2f}")
    serve = med["tcl serve's imports"]
    print(f"ratio tcl serve's imports / python -c pass: {serve / base:.2f} ({serve * 1000:.0f} ms)")
    print("submit's imports (cumulative ms):")
    for us, name in top_imports("from tcl.cli.app import build; build('submit')", 12):
        print(f"  {us / 1000:7.1f}  {name}")


if __name__ == "__main__":
    main()
