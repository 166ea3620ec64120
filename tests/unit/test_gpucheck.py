"""bench/gpucheck's pure parts: the result wire between a row's child and the table, how a row
judges what it saw (NVML against the shim's discovery, what each task was shown), the model size
picked for a card. The rows themselves run in tests/integration/jobs/test_gpucheck.py (on the
CPU) and on a GPU machine (scripts/gpu-check.sh)."""

from __future__ import annotations

import pytest

from bench.gpucheck import inventory, isolation, mfu
from bench.gpucheck.report import Outcome, RowResult, emit, parse, run_row, table
from tcl.shim.api import Accelerator

UUID = "GPU-cb35bb6f-bb1b-c7a4-ead2-6952209d2af0"


def h200(index: int = 0, memory: int = 143771 * 2**20) -> Accelerator:
    return Accelerator(
        index=index,
        chip="h200",
        vendor="nvidia",
        name="NVIDIA H200",
        uuid=UUID,
        memory_bytes=memory,
    )


def test_a_result_survives_the_trip_from_child_to_table(capsys: pytest.CaptureFixture[str]) -> None:
    sent = RowResult("mfu", Outcome.BELOW_GOAL, "MFU 40.0%", {"mfu": 0.4, "probes": [[16, "oom"]]})
    print("compiling...")
    emit(sent)
    got = parse(capsys.readouterr().out)
    assert got == sent
    assert parse("no marker here\n") is None
    text = table([got, RowResult("inventory", Outcome.SKIPPED, "no nvidia-smi here")])
    lines = text.splitlines()
    assert lines[0].split() == ["row", "outcome", "time", "result"]
    assert (
        lines[2].startswith("mfu ") and "below goal" in lines[2] and lines[2].endswith("MFU 40.0%")
    )
    assert "skipped" in lines[3]


def test_a_row_that_raises_is_a_failed_result_not_a_crash(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def broken() -> RowResult:
        raise RuntimeError("cudnn: no kernel\nCUDNN_STATUS_NOT_SUPPORTED")

    assert run_row("mfu", broken) == 1
    got = parse(capsys.readouterr().out)
    assert got is not None and got.outcome is Outcome.FAILED
    assert got.summary == "RuntimeError: CUDNN_STATUS_NOT_SUPPORTED"
    assert run_row("mfu", lambda: RowResult("mfu", Outcome.BELOW_GOAL, "slow")) == 0


def test_nvml_and_the_shim_must_agree_on_every_gpu() -> None:
    nvml = [{"index": 0, "name": "NVIDIA H200", "uuid": UUID, "memory_bytes": 143771 * 2**20}]
    assert inventory.mismatches([h200()], nvml) == []
    # nvidia-smi rounds to whole MiB: less than one MiB apart is the same card
    assert inventory.mismatches([h200()], [{**nvml[0], "memory_bytes": 143771 * 2**20 + 5}]) == []
    assert inventory.mismatches([h200(memory=80 * 2**30)], nvml)
    assert inventory.mismatches([h200()], [{**nvml[0], "uuid": "GPU-other"}])
    assert inventory.mismatches([h200(), h200(1)], nvml) == ["2 GPUs found, NVML has 1"]


def test_a_task_must_see_exactly_the_gpu_it_was_given() -> None:
    ids = {0: "0000:19:00.0", 1: "0000:3B:00.0"}
    own = {
        "cuda_visible_devices": "1",
        "devices": 1,
        "pci_bus_id": "0000:3b:00.0",
        "allocated": [1],
        "exit_code": 0,
    }
    assert isolation.verdict(own, 1, ids) == []
    assert isolation.verdict({**own, "pci_bus_id": "0000:19:00.0"}, 1, ids)  # its neighbour's
    assert isolation.verdict({**own, "devices": 2}, 1, ids)  # sees both
    assert isolation.verdict({**own, "cuda_visible_devices": None}, 1, ids)  # not restricted
    none = {"cuda_visible_devices": "", "devices": 0, "allocated": [], "exit_code": 0}
    assert isolation.verdict(none, 0, ids) == []
    assert isolation.verdict({**none, "devices": 1}, 0, ids)  # a GPU it was not given


def test_the_gpt_is_sized_for_what_jax_may_allocate_on_the_card() -> None:
    assert mfu.size_for(None) is mfu.TINY
    h200_size = mfu.size_for(int(0.75 * 141e9))
    assert (h200_size.batch, h200_size.arch["d_model"]) == (16, 2048)
    assert mfu.size_for(int(0.75 * 80e9)).batch == 8
    assert mfu.size_for(int(0.75 * 24e9)).arch["d_model"] == 768
    assert "architecture/attention_impl=cudnn" in mfu.overrides(h200_size, "cudnn")
    assert "architecture/attention_impl=null" in mfu.overrides(h200_size, None)
