"""``GET /api/metrics``: the job's process tree (psutil) and the GPUs ``nvidia-smi`` reports."""

from __future__ import annotations

import shutil
import subprocess
import time
from typing import TYPE_CHECKING

from tcl.runner.api import Metrics

if TYPE_CHECKING:
    import psutil

_NVIDIA_FIELDS = "index,name,utilization.gpu,memory.used,memory.total"


def collect(pid: int | None) -> Metrics:
    import psutil  # imported here: not on the start-up path

    cpu = 0.0
    rss = 0
    count = 0
    if pid is not None:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            procs = []
        for p in procs:
            try:
                with p.oneshot():
                    cpu += _cpu_percent(p)
                    rss += p.memory_info().rss
                    count += 1
            except psutil.Error:
                continue
    return Metrics(cpu_percent=cpu, memory_bytes=rss, processes=count, accelerators=_gpus())


def _cpu_percent(p: psutil.Process) -> float:
    """CPU time over the process lifetime, in percent of one core (no sampling sleep)."""
    times = p.cpu_times()
    age_s = max(time.time() - p.create_time(), 1e-3)
    return float(100.0 * (times.user + times.system) / age_s)


def _gpus() -> list[dict[str, float | int | str]]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return []
    try:
        out = subprocess.run(
            [exe, f"--query-gpu={_NVIDIA_FIELDS}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus: list[dict[str, float | int | str]] = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            continue
        try:
            gpus.append(
                {
                    "index": int(parts[0]),
                    "name": parts[1],
                    "utilization_percent": float(parts[2]),
                    "memory_used_bytes": int(float(parts[3]) * 2**20),
                    "memory_total_bytes": int(float(parts[4]) * 2**20),
                }
            )
        except ValueError:
            continue
    return gpus
