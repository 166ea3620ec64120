"""TPU accelerator types (``v4-32``) → chip name, chips, workers.

Google names a slice by its generation and a count: TensorCores for v2, v3, v4 and v5p (two
per chip), chips for v5e (``v5litepod``) and v6e. Every worker (TPU VM) of a multi-host slice
holds a fixed number of chips. Sources (Cloud TPU docs, system architecture pages):

- v2, v3: 2 TensorCores per chip, 4 chips per host
  (cloud.google.com/tpu/docs/system-architecture-tpu-vm)
- v4: 2 TensorCores per chip (megacore), 4 chips per host: v4-8 = 4 chips on 1 host,
  v4-32 = 16 chips on 4 hosts (cloud.google.com/tpu/docs/v4)
- v5p: 2 TensorCores per chip, 4 chips per host: 2x2x2 = 16 cores, 8 chips, 2 hosts
  (cloud.google.com/tpu/docs/v5p)
- v5e: 1 TensorCore per chip; a single host takes up to 8 chips (1x1, 2x2, 2x4), multi-host
  slices have 8 chips per host: 4x4 = 16 chips on 2 hosts (cloud.google.com/tpu/docs/v5e)
- v6e: 1 TensorCore per chip; single hosts up to 8 chips, multi-host slices 4 chips per host
  (cloud.google.com/tpu/docs/v6e)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tcl.control.errors import ConfigError


@dataclass(frozen=True)
class Generation:
    chip: str  # the chip name tcl uses (--chip)
    cores_per_unit: int  # what the type's number counts, per chip (2: TensorCores)
    chips_per_host: int  # in a multi-host slice
    single_host_max: int  # the largest slice that is one host, in chips


GENERATIONS: dict[str, Generation] = {
    "v2": Generation("tpu-v2", 2, 4, 4),
    "v3": Generation("tpu-v3", 2, 4, 4),
    "v4": Generation("tpu-v4", 2, 4, 4),
    "v5p": Generation("tpu-v5p", 2, 4, 4),
    "v5litepod": Generation("tpu-v5e", 1, 8, 8),
    "v6e": Generation("tpu-v6e", 1, 4, 8),
}

_TYPE = re.compile(r"^(?P<gen>[a-z0-9]+)-(?P<count>[1-9][0-9]*)$")


@dataclass(frozen=True)
class Slice:
    accelerator_type: str
    chip: str
    chips: int
    workers: int
    named_count: int  # the type's own number (TensorCores for v4: v4-32 → 32)

    @property
    def chips_per_worker(self) -> int:
        return self.chips // self.workers

    def describe(self) -> str:
        workers = "1 worker" if self.workers == 1 else f"{self.workers} workers"
        return f"{self.accelerator_type}: {self.chips} x {self.chip} on {workers}"

    def takes(self, chips: int) -> bool:
        """A job takes the whole slice (every host must run it: jax-ml/jax#12456); asking
        for the type's own number (``-n 32`` for a v4-32) means the same."""
        return chips in (self.chips, self.named_count)


def parse_accelerator_type(text: str) -> Slice:
    m = _TYPE.match(text.strip().lower())
    gen = GENERATIONS.get(m["gen"]) if m else None
    if m is None or gen is None:
        known = ", ".join(f"{g}-N" for g in GENERATIONS)
        raise ConfigError(f"unknown TPU accelerator type {text!r} (known: {known})")
    count = int(m["count"])
    if count % gen.cores_per_unit:
        raise ConfigError(
            f"TPU accelerator type {text!r}: the count must be a multiple of "
            f"{gen.cores_per_unit} (TensorCores, {gen.cores_per_unit} per chip)"
        )
    chips = count // gen.cores_per_unit
    if chips <= gen.single_host_max:
        workers = 1
    elif chips % gen.chips_per_host:
        raise ConfigError(
            f"TPU accelerator type {text!r}: {chips} chips do not fill hosts "
            f"of {gen.chips_per_host}"
        )
    else:
        workers = chips // gen.chips_per_host
    return Slice(text.strip().lower(), gen.chip, chips, workers, count)
