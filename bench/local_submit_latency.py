"""Warm `tcl submit` -> first line on the local default (no config: one local host, the process
executor, the `tcl serve` daemon and the local shim already started by a first submit), against
`python -c` printing the same line, interleaved in one run (median of N each).

    uv run python bench/local_submit_latency.py [--reps 7]

The issue's goal (29): ratio <= 10. A submit pays for the CLI's start (its imports: see
bench/cli_startup.py), the daemon's snapshot of the repo, a solver probe of the shim, the task,
a fresh runner process, the job spec and code, the job's own start, then the first event
pulled by the run controller into the log cache and handed to the CLI's follow.

It also prints the CPU time the `tcl submit` process itself used for the whole followed submit
(its own start, the request, every line printed; the rest of a submit waits on the daemon),
against `python -c pass`'s: the issue's "CLI-side overhead" of a submit (goal <= 100 ms).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench._controllib import TCL, interleaved_first_lines, path_with_this_python, print_ratio

PRINT = "import sys; print('first-line', flush=True)"


def cpu_s(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """The CPU seconds (user + system) the process of ``argv`` used, run to its end."""
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{argv}: exit code {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def print_cli_cpu(tcl_argv: list[str], env: dict[str, str], cwd: Path, reps: int) -> None:
    bare = [sys.executable, "-c", "pass"]
    tcl, base = [], []
    for _ in range(reps):
        tcl.append(cpu_s(tcl_argv, env, cwd))
        base.append(cpu_s(bare, env, cwd))
    t, b = statistics.median(tcl) * 1e3, statistics.median(base) * 1e3
    print(f"tcl submit's own CPU: median {t:.0f} ms  {[round(x * 1e3) for x in tcl]}")
    print(f"python -c pass CPU:   median {b:.0f} ms")
    print(f"submit's CLI-side overhead: {t - b:.0f} ms (target <= 100 ms)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tcl-bench-local-") as tmp:
        root = Path(tmp)
        repo, home = root / "repo", root / "home"
        repo.mkdir()
        home.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        (repo / "train.py").write_text(PRINT + "\n")
        drop = ("TCL_CONFIG", "TCL_DB_URL", "TCL_SERVE", "TCL_STATE_DIR")
        env = {k: v for k, v in os.environ.items() if k not in drop}
        env.update(HOME=str(home), NO_COLOR="1", PATH=path_with_this_python())
        tcl_argv = [TCL, "submit", "--", "python", "train.py"]
        base_argv = [sys.executable, "-c", PRINT]
        try:
            # warm-up: the daemon, the local shim, the code tarball, the page cache
            tcl_s, base_s = interleaved_first_lines(
                tcl_argv, base_argv, env, repo, args.reps, warm=2
            )
            print_cli_cpu(tcl_argv, env, repo, args.reps)
        finally:
            subprocess.run([TCL, "serve", "--stop"], env=env, cwd=repo, capture_output=True)
            from tcl.control.localshim import stop_local_shim

            stop_local_shim(home / ".local" / "share" / "tcl" / "local-shim")
        print_ratio("python -c", tcl_s, base_s, 10)


if __name__ == "__main__":
    main()
