"""Row 1, inventory: the shim's NVIDIA discovery against the real nvidia-smi and NVML.

What the shim reads (``tcl.shim.inventory.discover``: index, UUID, name, chip, memory) is
compared with NVML's own answers (``pynvml``, when installed); then a real process outside tcl
takes 256 MiB on GPU 0 and ``outside_usage_mib`` (what the shim's reconciler marks GPUs busy
from) must see it at ≥ ``BUSY_OUTSIDE_MIB``, and see it go once that process ends.

    python -m bench.gpucheck.inventory
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import Any

from bench.gpucheck.report import Outcome, RowResult, run_row
from tcl.shim.api import Accelerator
from tcl.shim.inventory import BUSY_OUTSIDE_MIB, discover, outside_usage_mib

HOLD_MIB = 256
# A process outside tcl that takes HOLD_MIB on the first visible GPU and waits for stdin to close.
_HOLDER = f"""
import sys, jax, jax.numpy as jnp
x = jnp.ones(({HOLD_MIB} * 2**20 // 4,), jnp.float32).block_until_ready()
print("holding", jax.devices()[0], flush=True)
sys.stdin.read()
"""
SEEN_WITHIN_S = 20.0


def nvml_view() -> list[dict[str, Any]] | None:
    """Each GPU as NVML reports it, or None without pynvml."""
    try:
        import pynvml
    except ImportError:
        return None
    pynvml.nvmlInit()
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            out.append(
                {
                    "index": i,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                    "memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                }
            )
        return out
    finally:
        pynvml.nvmlShutdown()


def mismatches(shim: list[Accelerator], nvml: list[dict[str, Any]]) -> list[str]:
    """How the shim's view differs from NVML's (memory: nvidia-smi rounds to whole MiB)."""
    if len(shim) != len(nvml):
        return [f"{len(shim)} GPUs found, NVML has {len(nvml)}"]
    out = []
    for a, n in zip(shim, nvml, strict=True):
        if (a.index, a.uuid, a.name) != (n["index"], n["uuid"], n["name"]):
            out.append(f"GPU {a.index}: {a.uuid} {a.name!r} vs NVML {n['uuid']} {n['name']!r}")
        if abs((a.memory_bytes or 0) - n["memory_bytes"]) >= 2**20:
            out.append(f"GPU {a.index}: {a.memory_bytes} bytes vs NVML {n['memory_bytes']}")
    return out


def wait_usage(uuid: str, present: bool) -> tuple[int, float]:
    """(MiB seen on `uuid`, seconds) once usage is ≥ the threshold (`present`) or below it."""
    t0 = time.monotonic()
    while True:
        mib = outside_usage_mib().get(uuid, 0)
        if (mib >= BUSY_OUTSIDE_MIB) == present or time.monotonic() - t0 > SEEN_WITHIN_S:
            return mib, time.monotonic() - t0
        time.sleep(0.25)


def busy_outside(gpu: Accelerator) -> dict[str, Any]:
    env = {
        **os.environ,
        "CUDA_VISIBLE_DEVICES": str(gpu.index),
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
    }
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        line = holder.stdout.readline()
        if not line.startswith("holding"):
            raise RuntimeError(f"the holder process did not start: {line!r}")
        seen_mib, seen_s = wait_usage(gpu.uuid or "", present=True)
    finally:
        holder.stdin.close()
        holder.wait(60)
    after_mib, gone_s = wait_usage(gpu.uuid or "", present=False)
    return {
        "held_mib": seen_mib,
        "seen_after_s": round(seen_s, 2),
        "after_exit_mib": after_mib,
        "gone_after_s": round(gone_s, 2),
    }


def check() -> RowResult:
    if shutil.which("nvidia-smi") is None:
        return RowResult("inventory", Outcome.SKIPPED, "no nvidia-smi here (no NVIDIA GPU)")
    gpus = [a for a in discover(None).accelerators if a.vendor == "nvidia"]
    if not gpus:
        return RowResult("inventory", Outcome.FAILED, "nvidia-smi is here but found no GPU")
    nvml = nvml_view()
    wrong = mismatches(gpus, nvml) if nvml is not None else []
    busy = busy_outside(gpus[0])
    first = gpus[0]
    figures: dict[str, Any] = {
        "gpus": len(gpus),
        "name": first.name,
        "chip": first.chip,
        "memory_gib": round((first.memory_bytes or 0) / 2**30, 1),
        "nvml": "absent" if nvml is None else (wrong or "matches"),
        **busy,
    }
    seen = busy["held_mib"] >= BUSY_OUTSIDE_MIB
    gone = busy["after_exit_mib"] < BUSY_OUTSIDE_MIB
    summary = (
        f"{len(gpus)}x {first.name} ({first.chip}, {figures['memory_gib']} GiB); NVML "
        f"{'absent' if nvml is None else ('agrees' if not wrong else 'DISAGREES: ' + wrong[0])}; "
        f"outside process {'seen' if seen else 'NOT seen'} at {busy['held_mib']} MiB "
        f"(in {busy['seen_after_s']} s), {'gone' if gone else 'STILL seen'} after it exited"
    )
    ok = seen and gone and not wrong
    return RowResult("inventory", Outcome.OK if ok else Outcome.BELOW_GOAL, summary, figures)


if __name__ == "__main__":
    sys.exit(run_row("inventory", check))
