"""Metrics as JSON lines, and MFU against the chip's dense bf16 peak."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import IO, Any

import jax

from tcl.runner.metricline import format_line

# Dense bf16 peak FLOP/s per device, by a substring of `device.device_kind`.
PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 989e12),
    ("H100", 989e12),
    ("A100", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("TPU v6", 918e12),
    ("TPU v5p", 459e12),
    ("TPU v5", 197e12),  # v5e ("TPU v5 lite")
    ("TPU v4", 275e12),
)


def peak_flops_per_device(override: float | None = None) -> float | None:
    if override:
        return override
    kind = jax.devices()[0].device_kind
    for name, flops in PEAK_BF16_FLOPS:
        if name in kind:
            return flops
    return None  # CPU and unknown chips: MFU is reported as null


def chip_name() -> str:
    d = jax.devices()[0]
    return f"{d.platform}:{d.device_kind}"


log = logging.getLogger("tcl.jobs.metrics")


def summary_line(record: dict[str, Any]) -> str:
    """One human line per record for the job's log (the JSON file keeps every field)."""
    parts = [f"{record.get('kind', 'metrics')} step {record.get('step', '?')}"]
    for key, value in record.items():
        if key in ("kind", "step", "ts") or value is None:
            continue
        parts.append(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}")
    return "  ".join(parts)


class MetricsWriter:
    """Appends one JSON object per line to `path` (main process only), logs a summary, and
    prints the record as a ``TCL_METRIC`` line on stdout: the runner keeps that line as a
    metric event, so `tcl metrics RUN` has the points wherever the job ran."""

    def __init__(self, path: Path, enabled: bool = True) -> None:
        self.path = path
        self._f: IO[str] | None = None
        if enabled:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._f = path.open("a", buffering=1)

    def write(self, record: dict[str, Any]) -> None:
        if self._f is not None:
            self._f.write(json.dumps({"ts": round(time.time(), 3), **record}) + "\n")
            log.info("%s", summary_line(record))
            print(format_line(_finite(record)), flush=True)

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None


def _finite(record: dict[str, Any]) -> dict[str, Any]:
    """The record less its NaN and infinite values, which JSON (and so the line) cannot hold."""
    return {k: v for k, v in record.items() if not (isinstance(v, float) and not math.isfinite(v))}


def read_metrics(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
