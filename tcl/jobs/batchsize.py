"""Auto batch-size: the largest per-device batch size that fits, found by binary search.

Each probe is a short subprocess (`python -m tcl.jobs.launch ... --probe`: compile and a few
steps) with its own temp root, so it never touches the real run's checkpoints. A probe whose
output holds one of XLA's out-of-memory wordings (GPU or TPU, `OOM_MARKERS`) ran out of memory;
any other failure stops the search. Results are cached per (model config, chip, device count).

The searching process must not hold the accelerators while its probes run: a JAX process
preallocates 75 % of each GPU's memory, and a TPU chip opens in one process at a time. So the
chip and device count of the cache key are read in a subprocess too (`describe_devices`), and
the real run opens its devices only after the search.
"""

from __future__ import annotations

import enum
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tcl.atomic import write_json_atomic
from tcl.jobs.errors import BatchSizeError
from tcl.runner import nodeenv

CANDIDATES: tuple[int, ...] = (1024, 512, 256, 128, 64, 32, 16, 10, 8, 4, 3, 2, 1)
# XLA's out-of-memory wordings. GPU: "RESOURCE_EXHAUSTED: Out of memory while trying to allocate
# N bytes" (the BFC allocator), "CUDA_ERROR_OUT_OF_MEMORY" (a failed cuMemAlloc, preallocation
# included). TPU: "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in
# memory space hbm" (at compile time), "Attempting to allocate ... That was not possible" (at
# run time).
OOM_MARKERS = (
    "RESOURCE_EXHAUSTED",
    "Out of memory while trying to allocate",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "Ran out of memory in memory space",
    "That was not possible",
)
BATCH_SIZE_ENV = "TCL_DISPATCH_BATCH_SIZE"
CACHE_ENV = "TCL_BATCH_SIZE_CACHE"
CACHE_VERSION = 1
PROBE_STEPS = 3


class ProbeOutcome(enum.StrEnum):
    FITS = "fits"
    OOM = "oom"


Probe = Callable[[int], ProbeOutcome]


def search(probe: Probe, candidates: Sequence[int] = CANDIDATES) -> int:
    """Largest candidate for which `probe` fits, assuming fit is monotone in the size."""
    sizes = sorted(set(candidates))
    if not sizes or sizes[0] < 1:
        raise BatchSizeError(f"invalid candidates {list(candidates)}")
    fits, ooms = -1, len(sizes)  # invariant: sizes[fits] fits, sizes[ooms] runs out of memory
    while ooms - fits > 1:
        mid = (fits + ooms) // 2
        if probe(sizes[mid]) is ProbeOutcome.FITS:
            fits = mid
        else:
            ooms = mid
    if fits < 0:
        raise BatchSizeError(f"no batch size fits (smallest tried: {sizes[0]})")
    return sizes[fits]


def classify(returncode: int, output: str) -> ProbeOutcome:
    if any(marker in output for marker in OOM_MARKERS):
        return ProbeOutcome.OOM
    if returncode == 0:
        return ProbeOutcome.FITS
    tail = "\n".join(output.strip().splitlines()[-15:])
    raise BatchSizeError(f"probe failed (exit {returncode}) without running out of memory:\n{tail}")


def subprocess_probe(
    key: str, config_path: Path | None, overrides: Sequence[str], timeout_s: float = 900.0
) -> Probe:
    """A probe that runs the job for a few steps in a child process with its own temp root."""

    def probe(batch_size: int) -> ProbeOutcome:
        with tempfile.TemporaryDirectory(prefix="tcl-bs-probe-") as root:
            argv = [
                sys.executable,
                "-m",
                "tcl.jobs.launch",
                key,
                str(config_path) if config_path else "-",
                root,
                "--probe",
                "--fresh",
                *overrides,
            ]
            env = {
                **single_process_env(os.environ),
                BATCH_SIZE_ENV: str(batch_size),
                "TCL_DISPATCH_ROOT_OVERRIDE": root,
            }
            t0 = time.monotonic()
            try:
                done = subprocess.run(
                    argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
                )
            except subprocess.TimeoutExpired as e:
                raise BatchSizeError(
                    f"probe at batch size {batch_size} timed out after {timeout_s:.0f} s"
                ) from e
            outcome = classify(done.returncode, done.stdout + done.stderr)
            print(
                f"tcl.jobs: batch size probe {batch_size}: {outcome} "
                f"({time.monotonic() - t0:.1f} s)",
                flush=True,
            )
            return outcome

    return probe


def single_process_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a probe: a job of one process, whatever this one is part of (a probe that
    joined the multi-node job would take a rank a live process holds)."""
    drop = {nodeenv.COORDINATOR, nodeenv.JAX_COORDINATOR_ADDRESS}
    single = {k: v for k, v in env.items() if k not in drop}
    single.update({nodeenv.NODES: "1", nodeenv.NODE_RANK: "0"})
    return single


_DESCRIBE = (
    "import json, jax; d = jax.devices(); "
    "print(json.dumps({'chip': f'{d[0].platform}:{d[0].device_kind}', 'devices': len(d)}))"
)


def describe_devices(timeout_s: float = 300.0) -> tuple[str, int]:
    """(chip name as `tcl.jobs.metrics.chip_name` gives it, device count), read by a child
    process that preallocates nothing, so that this process has not opened its devices."""
    env = {**single_process_env(os.environ), "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _DESCRIBE],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise BatchSizeError(f"reading the devices timed out after {timeout_s:.0f} s") from e
    lines = done.stdout.strip().splitlines()
    try:
        found = json.loads(lines[-1])
        return str(found["chip"]), int(found["devices"])
    except (IndexError, ValueError, KeyError, TypeError):
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise BatchSizeError(
            f"could not read the devices (exit {done.returncode}):\n{tail}"
        ) from None


# -- cache -------------------------------------------------------------------------------------


def cache_path() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tcl" / "batch_size.json"


def cache_key(model: str, chip: str, devices: int, extra: dict[str, Any] | None = None) -> str:
    blob = json.dumps(
        {"model": model, "chip": chip, "devices": devices, **(extra or {})}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _read_cache(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return {}
    entries = data.get("entries", {})
    return entries if isinstance(entries, dict) else {}


def cached(key: str, path: Path | None = None) -> int | None:
    entry = _read_cache(path or cache_path()).get(key)
    return int(entry["per_device_batch_size"]) if isinstance(entry, dict) else None


def store(key: str, batch_size: int, chip: str, path: Path | None = None) -> None:
    p = path or cache_path()
    entries = _read_cache(p)
    entries[key] = {"per_device_batch_size": batch_size, "chip": chip, "found_at": time.time()}
    write_json_atomic(p, {"version": CACHE_VERSION, "entries": entries})


def resolve(
    key: str,
    probe: Probe,
    chip: str,
    candidates: Sequence[int] = CANDIDATES,
    path: Path | None = None,
) -> tuple[int, bool]:
    """(batch size, from_cache): the cached size for `key`, or a fresh search that is stored."""
    hit = cached(key, path)
    if hit is not None:
        return hit, True
    size = search(probe, candidates)
    store(key, size, chip, path)
    return size, False
