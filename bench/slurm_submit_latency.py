"""`tcl submit` → the job's first log line on the SLURM testbed, vs bare `sbatch --wrap`.

Baseline (same run, same login node over SSH): `ssh slurm-login sbatch --wrap 'echo 1'`, then
wait until the line is in its output file (read on the shared filesystem every 10 ms). tcl:
`tcl submit -- echo 1` (through its `tcl serve` daemon, warm after a first submit), timed
until `1` is printed. Target: ratio ≤ 1.5 (medians). Then, in-process (no CLI, no daemon),
the time at which each step of one warm submit began, to show where the time goes.

    uv run python -m bench.slurm_submit_latency [--reps 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench._slurmlib import slurm_testbed, work_dir

TCL = str(Path(sys.executable).parent / "tcl")
VENV = str(Path(sys.executable).parent.parent)


def _sbatch_once(ssh_config: str, out_dir: Path, i: int) -> float:
    out = out_dir / f"wrap-{i}.out"
    t0 = time.perf_counter()
    subprocess.run(
        [
            "ssh",
            "-F",
            ssh_config,
            "slurm-login",
            "sbatch",
            "--parsable",
            "-p",
            "gpu",
            "-o",
            str(out),
            "--wrap",
            "'echo 1'",
        ],
        check=True,
        capture_output=True,
    )
    while True:
        try:
            if out.read_text().strip() == "1":
                return time.perf_counter() - t0
        except FileNotFoundError:
            pass
        time.sleep(0.01)


def _tcl_once(env: dict[str, str], repo: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [TCL, "submit", "--", "echo", "1"],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.strip() == "1":
            took = time.perf_counter() - t0
            proc.wait(60)
            return took
    raise RuntimeError(f"no line from tcl submit (exit {proc.wait()})")


def main(reps: int) -> None:
    with slurm_testbed() as ssh_config, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repo = root / "repo"
        repo.mkdir()
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        config = root / "config.yaml"
        config.write_text(f"""
clusters: {{c: {{work: {work_dir()}}}}}
hosts:
  hpc: {{type: slurm, ssh: slurm-login, ssh_config_file: {ssh_config}, cluster: c,
        runner_venv: {VENV}, partitions: [{{name: gpu, default: true}}]}}
""")
        env = {
            **os.environ,
            "HOME": str(root),
            "TCL_STATE_DIR": str(root / "state"),
            "TCL_CONFIG": str(config),
            "NO_COLOR": "1",
        }
        out_dir = work_dir() / "wrap"
        out_dir.mkdir(parents=True, exist_ok=True)
        try:
            _tcl_once(env, repo)  # warm: the daemon, its SSH connection, the code upload
            _sbatch_once(ssh_config, out_dir, -1)
            tcl, bare = [], []
            for i in range(reps):
                bare.append(_sbatch_once(ssh_config, out_dir, i))
                tcl.append(_tcl_once(env, repo))
        finally:
            subprocess.run([TCL, "serve", "--stop"], env=env, capture_output=True, check=False)
        phases = asyncio.run(_phases(config, repo, env))
        t, b = statistics.median(tcl), statistics.median(bare)
        print(
            f"tcl submit -> first line: {t:.2f} s (median of {reps}: "
            f"{', '.join(f'{x:.2f}' for x in tcl)})"
        )
        print(
            f"ssh sbatch --wrap -> line in output: {b:.2f} s "
            f"({', '.join(f'{x:.2f}' for x in bare)})"
        )
        print(f"ratio {t / b:.2f} (target <= 1.5)")
        print("one warm submit in-process, each step's start (s):")
        for at, what in phases:
            print(f"  {at:6.3f}  {what}")


async def _phases(config: Path, repo: Path, env: dict[str, str]) -> list[tuple[float, str]]:
    """Submit twice in one process (the first warms the connection), timing the second's steps
    up to its first log line."""
    from tcl.control.config import load_config_at
    from tcl.control.lifecycle.follow import follow
    from tcl.control.lifecycle.submit import Submission, submit
    from tcl.control.service import Control

    os.environ["TCL_STATE_DIR"] = env["TCL_STATE_DIR"]

    class Clock:
        """The observer of one submit: when each step began, and the first log line."""

        def __init__(self) -> None:
            self.t0 = time.perf_counter()
            self.marks: list[tuple[float, str]] = []

        def mark(self, text: str) -> None:
            self.marks.append((time.perf_counter() - self.t0, text))

        def status(self, text: str) -> None:
            self.mark(text)

        def progress(self, done: int, total: int) -> None: ...

        def note(self, text: str) -> None: ...

        def event(self, e: object) -> None:
            if getattr(e, "data", None) and not any(w == "first log line" for _, w in self.marks):
                self.mark("first log line")

    ctl = Control(load_config_at(config, True))
    try:
        for _ in range(2):
            clock = Clock()
            res = await submit(ctl, Submission(argv=["echo", "1"], cwd=repo), clock)
            clock.mark(f"submitted ({res.state})")
            await follow(ctl, ctl.store.get_run(res.run_id), clock.event)
    finally:
        await ctl.aclose()
    return clock.marks


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=5)
    main(p.parse_args().reps)
