"""Accelerator types (``v4-32``, ``v5litepod-16`` ...) and how many workers (hosts) they have.

v2, v3, v4 and v5p names count TensorCores (2 per chip); v5litepod and v6e names count chips.
A host has 4 chips (8 for a single-host v5litepod-8 / v6e-8 and for multi-host v5e, as on GCP).
"""

from __future__ import annotations

import math
import re
from typing import Any

from tests.tpuemu.errors import invalid

CORE_NAMED = {"v2": (8, 512), "v3": (8, 2048), "v4": (8, 4096), "v5p": (8, 12288)}
CHIP_NAMED = {"v5litepod": (1, 256), "v6e": (1, 256)}
CONFIG_TYPES = {"V2": "v2", "V3": "v3", "V4": "v4", "V5P": "v5p", "V5LITE_POD": "v5litepod"}
CONFIG_TYPES["V6E"] = "v6e"
CHIPS_PER_HOST = 4


def workers_for_type(accelerator_type: str, zone: str) -> int:
    """Worker count of ``accelerator_type``; 400 INVALID_ARGUMENT when GCP has no such type."""
    m = re.fullmatch(r"(v2|v3|v4|v5p|v5litepod|v6e)-(\d+)", accelerator_type)
    if m is None:
        raise invalid(
            f"Invalid value for field 'acceleratorType': '{accelerator_type}'. "
            f"Accelerator type is not available in zone {zone}.",
            "acceleratorType",
        )
    gen, size = m.group(1), int(m.group(2))
    if gen in CORE_NAMED:
        lo, hi = CORE_NAMED[gen]
        ok = lo <= size <= hi and size % 8 == 0 and (gen == "v5p" or _pow2(size))
        chips = size // 2
    else:
        lo, hi = CHIP_NAMED[gen]
        ok = lo <= size <= hi and (size in (1, 4, 8) or _pow2(size))
        chips = size
    if not ok:
        raise invalid(
            f"Invalid value for field 'acceleratorType': '{accelerator_type}'. "
            f"Unsupported size {size} for TPU {gen}.",
            "acceleratorType",
        )
    return _hosts(gen, chips)


def workers_for_config(config: dict[str, Any], zone: str) -> tuple[str, int]:
    """(acceleratorType, workers) of an ``acceleratorConfig`` ``{type, topology: "2x2x4"}``."""
    gen = CONFIG_TYPES.get(str(config.get("type")))
    topo = str(config.get("topology", ""))
    if gen is None or not re.fullmatch(r"\d+(x\d+){1,2}", topo):
        raise invalid(f"Invalid value for field 'acceleratorConfig': {config}", "acceleratorConfig")
    chips = math.prod(int(d) for d in topo.split("x"))
    name = f"{gen}-{chips * 2 if gen in CORE_NAMED else chips}"
    return name, workers_for_type(name, zone)


def _hosts(gen: str, chips: int) -> int:
    if gen in CHIP_NAMED and chips <= 8:
        return 1
    # multi-host v5e slices have 8 chips per host (cloud.google.com/tpu/docs/v5e: 4x4 is 16
    # chips on 2 hosts); v6e and the core-named generations 4
    per_host = 8 if gen == "v5litepod" else CHIPS_PER_HOST
    return max(1, chips // per_host)


def _pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0
