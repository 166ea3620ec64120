"""Row 4, auto batch size: the search against a real out-of-memory, and the real run at the
size it found.

``python -m tcl.jobs.launch gpt/train ... training/per_device_batch_size=-1`` as a user runs it:
the launcher reads the devices in a child, probes candidate sizes in children (compile and a few
steps each) until XLA runs out of memory, then trains at the largest size that fitted. JAX may
take ``MEMORY_FRACTION`` of the card here (``XLA_PYTHON_CLIENT_MEM_FRACTION``, a real allocator
limit), so the out-of-memory comes at a batch size that a few short probes reach. Goal: a size is
found, at least one probe ran out of memory, and the real run at that size ends without one.

    python -m bench.gpucheck.batchsize
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.gpucheck.report import Outcome, RowResult, run_row
from tcl.jobs.batchsize import CACHE_ENV, OOM_MARKERS

MEMORY_FRACTION = "0.25"
ARCH = {
    "block_size": 1024,
    "n_layers": 6,
    "d_model": 768,
    "n_heads": 12,
    "vocab_size": 50304,
    "dtype": "bfloat16",
}
REAL_STEPS = 10
_PROBE_LINE = re.compile(r"batch size probe (\d+): (\w+)")
_FOUND = re.compile(r"per_device_batch_size = (\d+) \((searched|cached)\)")


def on_gpu() -> bool:
    """Without opening the GPU here: this process must not hold memory the probes need."""
    return shutil.which("nvidia-smi") is not None and os.environ.get("JAX_PLATFORMS") != "cpu"


def check() -> RowResult:
    if not on_gpu():
        return RowResult(
            "batchsize", Outcome.SKIPPED, "no GPU here: a CPU cannot run out of device memory"
        )
    with tempfile.TemporaryDirectory(prefix="tcl-gpucheck-bs-") as root:
        argv = [
            sys.executable,
            "-m",
            "tcl.jobs.launch",
            "gpt/train",
            "-",
            str(Path(root) / "out"),
            *(f"architecture/{k}={v}" for k, v in ARCH.items()),
            "training/per_device_batch_size=-1",
            f"training/total_steps={REAL_STEPS}",
            "logging/report_interval=5",
            "logging/validation_interval=0",
            "logging/checkpoint_interval=0",
            "logging/checkpoint_at_end=false",
        ]
        env = {
            **os.environ,
            "XLA_PYTHON_CLIENT_MEM_FRACTION": MEMORY_FRACTION,
            CACHE_ENV: str(Path(root) / "batch_size.json"),
        }
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    out = done.stdout + done.stderr
    probes = [(int(m[1]), m[2]) for m in _PROBE_LINE.finditer(out)]
    found = _FOUND.search(out)
    size = int(found[1]) if found else None
    real_oom = [
        m
        for m in OOM_MARKERS
        if m in done.stdout + done.stderr.split("per_device_batch_size =")[-1]
    ]
    figures = {
        "memory_fraction": float(MEMORY_FRACTION),
        "probes": probes,
        "found": size,
        "real_run_exit": done.returncode,
        "real_run_oom": bool(real_oom),
    }
    if size is None or done.returncode != 0:
        tail = " | ".join(out.strip().splitlines()[-4:])[-400:]
        return RowResult("batchsize", Outcome.FAILED, f"exit {done.returncode}: {tail}", figures)
    any_oom = any(outcome == "oom" for _, outcome in probes)
    summary = (
        f"GPT 6x768 seq 1024 at {float(MEMORY_FRACTION):.0%} of the card: probes "
        + ", ".join(f"{b} {o}" for b, o in probes)
        + f"; found {size}/device; the real {REAL_STEPS}-step run at {size} exited "
        f"{done.returncode}{' with an OOM' if real_oom else ', no OOM'}"
    )
    ok = any_oom and not real_oom
    if not any_oom:
        summary += "; NO probe ran out of memory (the largest candidate fitted)"
    return RowResult("batchsize", Outcome.OK if ok else Outcome.BELOW_GOAL, summary, figures)


if __name__ == "__main__":
    sys.exit(run_row("batchsize", check))
