"""Inventory parsing against captured-format nvidia-smi outputs (see data/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tcl.shim.errors import BadRequest
from tcl.shim.inventory import (
    chip_from_name,
    discover,
    discover_tpus,
    parse_apps_query,
    parse_fake,
    parse_gpu_query,
    parse_topology,
    tpu_chip_from_type,
    tpu_device_paths,
)

DATA = Path(__file__).parent / "data"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_gpu_query_h100() -> None:
    gpus = parse_gpu_query(read("gpu_query_h100x8.csv"))
    assert [g.index for g in gpus] == list(range(8))
    assert {g.chip for g in gpus} == {"h100"}
    assert gpus[3].uuid == "GPU-6f2a1c3e-8b1d-4c5e-9a7f-0d1e2f3a4b53"
    assert gpus[0].memory_bytes == 81559 * 2**20
    assert gpus[0].vendor == "nvidia" and not gpus[0].fake


def test_gpu_query_mixed_names_and_unknown_memory() -> None:
    gpus = parse_gpu_query(read("gpu_query_mixed.csv"))
    assert [g.chip for g in gpus] == ["rtx4090", "a100", "v100", "l4"]
    assert gpus[3].memory_bytes == 0  # [N/A]


@pytest.mark.parametrize(
    ("name", "chip"),
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100"),
        ("NVIDIA A100-SXM4-40GB", "a100"),
        ("Tesla T4", "t4"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA GeForce RTX 3090", "rtx3090"),
        ("Quadro RTX 8000", "rtx8000"),
    ],
)
def test_chip_from_name(name: str, chip: str) -> None:
    assert chip_from_name(name) == chip


def test_gpu_query_garbage_names_the_line() -> None:
    with pytest.raises(ValueError, match="line 2"):
        parse_gpu_query("0, GPU-a, NVIDIA L4, 100\nNo devices were found\n")


def test_apps_query_sums_per_gpu_and_counts_unknown_as_busy() -> None:
    used = parse_apps_query(read("apps_query.csv"))
    assert used["GPU-6f2a1c3e-8b1d-4c5e-9a7f-0d1e2f3a4b52"] == 30120
    assert used["GPU-6f2a1c3e-8b1d-4c5e-9a7f-0d1e2f3a4b55"] == 84  # 64 + 20 < 100: not busy
    assert used["GPU-6f2a1c3e-8b1d-4c5e-9a7f-0d1e2f3a4b56"] == 100  # [N/A] counts as busy
    assert parse_apps_query("") == {}


def test_topology_nvswitch_box() -> None:
    topo = parse_topology(read("topo_h100x8.txt"))  # ANSI-underlined header
    assert topo.nvlink_groups == [frozenset(range(8))]
    assert topo.numa_groups == [frozenset({0, 1, 2, 3}), frozenset({4, 5, 6, 7})]


def test_topology_nvlink_pairs() -> None:
    topo = parse_topology(read("topo_a100x4_pairs.txt"))
    assert topo.nvlink_groups == [frozenset({0, 1}), frozenset({2, 3})]
    assert topo.domains[:2] == [frozenset({0, 1}), frozenset({2, 3})]


def test_topology_pcie_only_numa() -> None:
    topo = parse_topology(read("topo_l4x4_pcie.txt"))
    assert [g for g in topo.nvlink_groups if len(g) > 1] == []
    assert topo.domains == [frozenset({0, 1}), frozenset({2, 3})]


def test_topology_unreadable_is_empty() -> None:
    assert parse_topology("").domains == []
    assert parse_topology("NVML: Unable to determine the device handle").domains == []


def test_fake() -> None:
    accels = parse_fake("h100:2,a100:1")
    assert [(a.index, a.chip, a.fake, a.vendor) for a in accels] == [
        (0, "h100", True, "fake"),
        (1, "h100", True, "fake"),
        (2, "a100", True, "fake"),
    ]
    assert len(discover("h100:8").accelerators) == 8
    for bad in ("h100", "h100:x", ":3", "h100:0"):
        with pytest.raises(BadRequest, match="CHIP:COUNT"):
            parse_fake(bad)


def test_tpu_accel_devices(tmp_path: Path) -> None:
    for i in (0, 1, 2, 3, 10):  # accel10 sorts after accel2: numeric order, not text
        (tmp_path / f"accel{i}").touch()
    (tmp_path / "accelerator").touch()  # not a chip
    chips = discover_tpus(tmp_path, "tpu-v4")
    assert [(c.index, c.chip, c.vendor) for c in chips] == [(i, "tpu-v4", "tpu") for i in range(5)]
    expected = [str(tmp_path / f"accel{i}") for i in (0, 1, 2, 3, 10)]
    assert tpu_device_paths(tmp_path) == expected
    assert tpu_device_paths(tmp_path, [1, 4]) == [expected[1], expected[4]]


def test_tpu_vfio_devices(tmp_path: Path) -> None:
    (tmp_path / "vfio").mkdir()
    for name in ("vfio", "0", "1", "2", "3"):
        (tmp_path / "vfio" / name).touch()
    chips = discover_tpus(tmp_path, "tpu-v5p")
    assert [(c.index, c.chip) for c in chips] == [(i, "tpu-v5p") for i in range(4)]
    vfio = tmp_path / "vfio"
    assert tpu_device_paths(tmp_path, [2]) == [str(vfio / "vfio"), str(vfio / "2")]
    assert tpu_device_paths(tmp_path)[0] == str(vfio / "vfio")
    assert discover_tpus(tmp_path / "nothing", None) == []
    assert tpu_device_paths(tmp_path / "nothing") == []


def test_tpu_chip_name_from_flag_or_node_type(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(4):
        (tmp_path / f"accel{i}").touch()
    monkeypatch.setattr("tcl.shim.inventory._nvidia_smi", lambda _args: None)
    monkeypatch.setenv("TPU_ACCELERATOR_TYPE", "v4-16")
    assert {a.chip for a in discover(None, tmp_path).accelerators} == {"tpu-v4"}
    inv = discover(None, tmp_path, tpu_chip="tpu-v5litepod")  # the flag wins over the image
    assert [a.chip for a in inv.accelerators] == ["tpu-v5litepod"] * 4
    monkeypatch.delenv("TPU_ACCELERATOR_TYPE")
    assert discover(None, tmp_path).accelerators[0].chip == "tpu"
    assert tpu_chip_from_type("v5litepod-8") == "tpu-v5litepod"
    fake = discover("tpu-v4:4", tmp_path, tpu_chip="tpu-v5p").accelerators
    assert [(a.chip, a.vendor) for a in fake] == [("tpu-v4", "fake")] * 4
