"""The job's project environment (``tcl.runner.projectenv``): what its setup adds to a job's
start when the environment is built (a host's first run of a lock) and when it is reused (every
later run), against starting the job's command directly, alternating, in the same run. The
project is ``tests/uvproject.py``'s (two wheels and cloudpickle, offline).

    uv run python -m bench.project_env [ROUNDS]

Prints ``ratio reuse/build`` (the issue's goal: ≤ 0.05) and each one's added seconds."""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tcl.runner import projectenv
from tests.uvproject import make_project, uv_env

LAUNCHER = [sys.executable, "-I", "-S", projectenv.__file__]  # as the runner starts it
JOB = ["true"]  # the launcher's own cost, not an interpreter's start


def _timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    env = uv_env()
    with tempfile.TemporaryDirectory(prefix="tcl-bench-projectenv-") as tmp:
        root = make_project(Path(tmp) / "repo")
        builds, reuses, bare = [], [], []
        for i in range(rounds):
            envs = Path(tmp) / f"envs-{i}"
            wrapped = [*LAUNCHER, "--root", str(root), "--envs", str(envs), "--", *JOB]
            bare.append(_timed(JOB, env, root))
            builds.append(_timed(wrapped, env, root))  # a new env dir: built
            reuses.append(_timed(wrapped, env, root))  # the same: reused
            shutil.rmtree(envs)
    b, r, base = statistics.median(builds), statistics.median(reuses), statistics.median(bare)
    print(f"job alone       p50 {base * 1000:7.1f} ms")
    print(f"env built       p50 {b * 1000:7.1f} ms  (adds {(b - base) * 1000:.1f} ms)")
    print(f"env reused      p50 {r * 1000:7.1f} ms  (adds {(r - base) * 1000:.1f} ms)")
    print(f"ratio reuse/build (setup added) {(r - base) / (b - base):.3f}")
    print(f"ratio reused/alone {r / base:.2f}")


if __name__ == "__main__":
    main()
