"""Warm `tcl submit` -> first line on the local default (no config: one local host, the process
executor, the `tcl serve` daemon and the local shim already started by a first submit), against
`python -c` printing the same line, interleaved in one run (median of N each).

    uv run python bench/local_submit_latency.py [--reps 7]

The issue's goal (29): ratio <= 10. A submit pays for the CLI's start (its imports: see
bench/cli_startup.py), the daemon's snapshot of the repo, a solver probe of the shim, the task,
a fresh runner process, the job spec and code, the job's own start, then the first event
pulled by the run controller into the log cache and handed to the CLI's follow.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench._controllib import TCL, interleaved_first_lines, print_ratio

PRINT = "import sys; print('first-line', flush=True)"


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
        env.update(HOME=str(home), NO_COLOR="1")
        tcl_argv = [TCL, "submit", "--", "python", "train.py"]
        base_argv = [sys.executable, "-c", PRINT]
        try:
            # warm-up: the daemon, the local shim, the code tarball, the page cache
            tcl_s, base_s = interleaved_first_lines(
                tcl_argv, base_argv, env, repo, args.reps, warm=2
            )
        finally:
            subprocess.run([TCL, "serve", "--stop"], env=env, cwd=repo, capture_output=True)
            from tcl.control.localshim import stop_local_shim

            stop_local_shim(home / ".local" / "share" / "tcl" / "local-shim")
        print_ratio("python -c", tcl_s, base_s, 10)


if __name__ == "__main__":
    main()
