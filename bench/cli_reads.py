"""`tcl ps -a --json`, `tcl logs RUN` and `tcl hosts --check --json` answered by the running
`tcl serve` daemon, handed to its CLI fork server (the default: the `tcl` process only passes
its streams and waits) and run in their own process (`TCL_CLI_FORK=0`), against the same
commands done in the CLI process (`TCL_SERVE=0`: the store opened, the backends imported), and
the bare interpreter, interleaved in one run on the local default (median of N each; wall time,
the `tcl` process's own CPU time and the machine's, from /proc/stat: what the command cost
wherever it ran, the daemon's and the forked command's share included).

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


def busy_s() -> float:
    """The machine's busy CPU seconds so far (all CPUs; /proc/stat)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, float]:
    """Wall, own CPU (user + system of the child) and machine CPU seconds of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    b0 = busy_s()
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env, cwd=cwd)
    wall = time.perf_counter() - t0
    machine = busy_s() - b0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, own, machine


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
        own = {**env, "TCL_CLI_FORK": "0"}
        try:
            for i in range(args.runs):
                cmd = [TCL, "submit", "--", "python3", "-c", f"print({i})"]
                subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=work)
            ps = subprocess.run(
                [TCL, "ps", "-a", "--json"], check=True, capture_output=True, env=env, cwd=work
            )
            run_id = json.loads(ps.stdout)[0]["run_id"]
            cases: dict[str, tuple[list[str], dict[str, str]]] = {
                "python -c pass": ([sys.executable, "-c", "pass"], env)
            }
            for what, argv in (
                ("tcl ps -a --json", [TCL, "ps", "-a", "--json"]),
                ("tcl logs RUN", [TCL, "logs", run_id]),
                ("tcl hosts --check --json", [TCL, "hosts", "--check", "--json"]),
            ):
                cases[f"{what} (forked)"] = (argv, env)
                cases[f"{what} (daemon)"] = (argv, own)
                cases[f"{what} (in-process)"] = (argv, here)
            for argv, e in cases.values():  # warm-up
                timed(argv, e, work)
            walls: dict[str, list[float]] = {k: [] for k in cases}
            cpus: dict[str, list[float]] = {k: [] for k in cases}
            machines: dict[str, list[float]] = {k: [] for k in cases}
            for _ in range(args.reps):
                for name, (argv, e) in cases.items():
                    wall, cpu, machine = timed(argv, e, work)
                    walls[name].append(wall)
                    cpus[name].append(cpu)
                    machines[name].append(machine)
        finally:
            subprocess.run([TCL, "serve", "--stop"], env=env, cwd=work, capture_output=True)
            from tcl.control.localshim import stop_local_shim

            stop_local_shim(home / "state" / "local-shim")
    med_wall = {k: statistics.median(v) for k, v in walls.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpus.items()}
    med_machine = {k: statistics.median(v) for k, v in machines.items()}
    for name in cases:
        wall_ms, cpu_ms = med_wall[name] * 1000, med_cpu[name] * 1000
        machine_ms = med_machine[name] * 1000
        print(
            f"{name:<42} wall median {wall_ms:6.0f} ms  own cpu {cpu_ms:6.0f} ms"
            f"  machine cpu {machine_ms:6.0f} ms"
        )
    base = med_wall["python -c pass"]
    for what in ("tcl ps -a --json", "tcl logs RUN", "tcl hosts --check --json"):
        f, d, h = f"{what} (forked)", f"{what} (daemon)", f"{what} (in-process)"
        print(f"ratio {what} in-process / daemon (own cpu): {med_cpu[h] / med_cpu[d]:.2f}")
        print(f"ratio {what} daemon / forked (machine cpu): {med_machine[d] / med_machine[f]:.2f}")
        print(f"ratio {what} daemon / python -c pass (wall): {med_wall[d] / base:.2f}")
        print(f"ratio {what} forked / python -c pass (wall): {med_wall[f] / base:.2f}")


if __name__ == "__main__":
    main()
