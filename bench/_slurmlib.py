"""The SLURM testbed for benchmarks: its own dir and ports, so tests can run beside it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = {
    "BASE": "/tmp/tcl-bench-slurm",
    "LOGIN_PORT": "2239",
    "SLURMCTLD_PORT": "16890",
    "SLURMD_PORT": "17090",
}


def _script(name: str) -> str:
    argv = ["bash", str(ROOT / "scripts" / "testbed" / name)]
    res = subprocess.run(
        argv, env={**os.environ, **ENV}, capture_output=True, text=True, check=True
    )
    return res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""


@contextmanager
def slurm_testbed() -> Iterator[str]:
    """Start the cluster; yield the path of the ssh config naming its login node."""
    try:
        yield _script("slurm-up.sh")
    finally:
        _script("slurm-down.sh")


def work_dir() -> Path:
    return Path(ENV["BASE"]) / "work"
