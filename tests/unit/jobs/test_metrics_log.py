"""The job's log shows its metrics as readable lines, and not Orbax's OCDBT-merge notice."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tcl.runner.metricline import MetricRecord, parse_line


def test_metrics_go_to_the_file_and_a_summary_to_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tcl.jobs.metrics import MetricsWriter  # imports jax: not at collection

    caplog.set_level(logging.INFO, logger="tcl.jobs.metrics")
    w = MetricsWriter(tmp_path / "m.jsonl")
    w.write({"kind": "train", "step": 100, "loss": 2.3456789, "mfu": None, "tokens_per_s": 99.5})
    w.close()
    record = json.loads((tmp_path / "m.jsonl").read_text())
    assert record["loss"] == 2.3456789 and record["step"] == 100
    assert [r.getMessage() for r in caplog.records] == [
        "train step 100  loss 2.346  tokens_per_s 99.5"
    ]


def test_metrics_are_printed_as_metric_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runner keeps these lines as metric events (`tcl metrics RUN`)."""
    from tcl.jobs.metrics import MetricsWriter

    w = MetricsWriter(tmp_path / "m.jsonl")
    w.write({"kind": "train", "step": 100, "loss": 2.5, "mfu": None, "tokens_per_s": 99.5})
    w.write({"kind": "val", "step": 100, "val_loss": float("nan"), "val_ppl": 12.0})
    w.close()
    MetricsWriter(tmp_path / "other.jsonl", enabled=False).write({"kind": "train", "loss": 1.0})
    lines = capsys.readouterr().out.splitlines()
    assert [parse_line(line) for line in lines] == [
        MetricRecord(step=100, kind="train", values={"loss": 2.5, "tokens_per_s": 99.5}),
        MetricRecord(step=100, kind="val", values={"val_ppl": 12.0}),  # NaN: left out
    ]


def test_orbax_ocdbt_merge_notice_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    from tcl.jobs import checkpoint  # noqa: F401  (installs the absl log filter)

    absl = logging.getLogger("absl")
    with caplog.at_level(logging.WARNING, logger="absl"):
        absl.warning("Skipping merge of OCDBT checkpoints: No per-process OCDBT checkpoint ...")
        absl.warning("something else")
    assert [r.getMessage() for r in caplog.records] == ["something else"]
