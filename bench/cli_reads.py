"""`tcl ps -a --json`, `tcl logs RUN` and `tcl hosts --check --json` answered by the running
`tcl serve` daemon against the same commands done in the CLI process (`TCL_SERVE=0`: the store
opened, the backends imported), and the bare interpreter, interleaved in one run on the local
default (median of N each; wall time and the command's CPU time).

    uv run python bench/cli_reads.py [--reps 10] [--runs 20]

Target (issue 29): a read command's CLI-side overhead near the bare interpreter's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TCL = str(Path(sys.executable).with_name("tcl"))


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one command (CPU: user + system of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--runs", type=int, default=20, help="runs in the store")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tcl-bench-reads-") as tmp:
        home = Path(tmp)
        work = home / "work"
        work.mkdir()
        env = {k: v for k, v in os.environ.items() if k not in ("TCL_CONFIG", "TCL_DB_URL")}
        env.update(HOME=str(home), TCL_STATE_DIR=str(home / "state"), NO_COLOR="1")
        env.update(TCL_SERVE="1", TCL_SERVE_IDLE_EXIT_S="600")
        here = {**env, "TCL_SERVE": "0"}
        try:
            for i in range(args.runs):
                cmd = [TCL, "submit", "--", "python3", "-c", f"print({i})"]
                subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=work)
            ps = subprocess.run(
                [TCL, "ps", "-a", "--json"], check=True, capture_output=True, env=env, cwd=work
            )
            run_id = json.loads(ps.stdout)[0]["run_id"]
            cases = {
                "python -c pass": ([sys.executable, "-c", "pass"], env),
                "tcl ps -a --json (daemon)": ([TCL, "ps", "-a", "--json"], env),
                "tcl ps -a --json (in-process)": ([TCL, "ps", "-a", "--json"], here),
                "tcl logs RUN (daemon)": ([TCL, "logs", run_id], env),
                "tcl logs RUN (in-process)": ([TCL, "logs", run_id], here),
                "tcl hosts --check --json (daemon)": ([TCL, "hosts", "--check", "--json"], env),
                "tcl hosts --check --json (in-process)": (
                    [TCL, "hosts", "--check", "--json"],
                    here,
                ),
            }
            for argv, e in cases.values():  # warm-up
                timed(argv, e, work)
            walls: dict[str, list[float]] = {k: [] for k in cases}
            cpus: dict[str, list[float]] = {k: [] for k in cases}
            for _ in range(args.reps):
                for name, (argv, e) in cases.items():
                    wall, cpu = timed(argv, e, work)
                    walls[name].append(wall)
                    cpus[name].append(cpu)
        finally:
            subprocess.run([TCL, "serve", "--stop"], env=env, cwd=work, capture_output=True)
            from tcl.control.localshim import stop_local_shim

            stop_local_shim(home / "state" / "local-shim")
    med_wall = {k: statistics.median(v) for k, v in walls.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpus.items()}
    for name in cases:
        wall_ms, cpu_ms = med_wall[name] * 1000, med_cpu[name] * 1000
        print(f"{name:<40} wall median {wall_ms:6.0f} ms  cpu {cpu_ms:6.0f} ms")
    base = med_wall["python -c pass"]
    for what in ("tcl ps -a --json", "tcl logs RUN", "tcl hosts --check --json"):
        d, h = f"{what} (daemon)", f"{what} (in-process)"
        print(f"ratio {what} in-process / daemon (cpu): {med_cpu[h] / med_cpu[d]:.2f}")
        print(f"ratio {what} daemon / python -c pass (wall): {med_wall[d] / base:.2f}")


if __name__ == "__main__":
    main()
