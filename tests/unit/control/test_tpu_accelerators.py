"""TPU accelerator types → chips and workers, and the config errors for bad ones."""

from __future__ import annotations

import pytest

from tcl.control.backends.tpu.accelerators import parse_accelerator_type
from tcl.control.config import parse_config
from tcl.control.errors import ConfigError


@pytest.mark.parametrize(
    ("name", "chip", "chips", "workers"),
    [
        ("v4-8", "tpu-v4", 4, 1),  # TensorCores: 2 per chip
        ("v4-32", "tpu-v4", 16, 4),
        ("v4-24", "tpu-v4", 12, 3),
        ("v2-8", "tpu-v2", 4, 1),
        ("v3-32", "tpu-v3", 16, 4),
        ("v5p-16", "tpu-v5p", 8, 2),
        ("v5litepod-8", "tpu-v5e", 8, 1),  # chips: one host takes up to 8
        ("v5litepod-16", "tpu-v5e", 16, 2),
        ("v6e-8", "tpu-v6e", 8, 1),
        ("v6e-16", "tpu-v6e", 16, 4),
        ("V4-32", "tpu-v4", 16, 4),
    ],
)
def test_accelerator_types(name: str, chip: str, chips: int, workers: int) -> None:
    s = parse_accelerator_type(name)
    assert (s.chip, s.chips, s.workers) == (chip, chips, workers)
    assert s.takes(chips) and s.takes(s.named_count)
    assert not s.takes(chips - 1)


@pytest.mark.parametrize("name", ["v9-8", "v4", "v4-0", "v4-7", "h100-8", "v5p-12x", ""])
def test_bad_accelerator_types_are_refused(name: str) -> None:
    with pytest.raises(ConfigError, match="TPU accelerator type"):
        parse_accelerator_type(name)


def test_the_config_names_the_key_and_line_of_a_bad_accelerator_type() -> None:
    text = """hosts:
  pod:
    type: tpu
    zone: us-central2-b
    accelerator_type: v9-32
    version: tpu-ubuntu2204-base
"""
    with pytest.raises(ConfigError) as e:
        parse_config(text, "cfg.yaml")
    assert str(e.value).startswith("cfg.yaml:5: hosts.pod.accelerator_type: ")
    assert str(e.value).endswith(
        "unknown TPU accelerator type 'v9-32' (known: v2-N, v3-N, v4-N, v5p-N, v5litepod-N, v6e-N)"
    )
    assert "\n" not in str(e.value)
