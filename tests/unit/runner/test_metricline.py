"""The TCL_METRIC line: what a job prints is read back; anything else stays a log line."""

from __future__ import annotations

import json

import pytest

from tcl.runner.metricline import (
    MAX_KIND_CHARS,
    MAX_LINE_BYTES,
    MAX_VALUES,
    PREFIX,
    MetricRecord,
    Phase,
    format_line,
    parse_json,
    parse_line,
    phase_line,
)


def test_a_printed_record_reads_back() -> None:
    line = format_line({"kind": "train", "step": 120, "loss": 2.31, "lr": 3e-4})
    assert line == 'TCL_METRIC {"kind":"train","step":120,"loss":2.31,"lr":0.0003}'
    rec = parse_line(line + "\n")
    assert rec == MetricRecord(step=120, kind="train", values={"loss": 2.31, "lr": 3e-4})
    assert parse_line(line + "\r\n") == rec


def test_step_and_kind_are_optional_and_other_keys_are_dropped() -> None:
    rec = parse_line('TCL_METRIC {"acc": 1, "chip": "h100", "mfu": null, "ok": true, "ts": 5}')
    assert rec == MetricRecord(step=None, kind="", values={"acc": 1.0})


def test_a_step_alone_is_a_heartbeat() -> None:
    """What ``tcl.jobs.heartbeat(step)`` prints: a metric event (hang detection reads its
    step) with no value (the metric store keeps no point of it)."""
    rec = parse_line('TCL_METRIC {"step": 7, "kind": "heartbeat"}')
    assert rec == MetricRecord(step=7, kind="heartbeat", values={})


def test_to_json_is_canonical_and_parses_back() -> None:
    rec = MetricRecord(step=3, kind="val", values={"val_loss": 1.5, "acc": 0.25})
    assert rec.to_json() == '{"acc":0.25,"kind":"val","step":3,"val_loss":1.5}'
    assert parse_json(rec.to_json()) == rec
    bare = MetricRecord(step=None, kind="", values={"x": 1.0})
    assert json.loads(bare.to_json()) == {"x": 1.0}


@pytest.mark.parametrize(
    "line",
    [
        "TCL_METRIC nope",
        "TCL_METRIC",  # no space, no object
        "TCL_METRIC [1, 2]",
        'TCL_METRIC {"kind": "train"}',  # no value and no step
        'TCL_METRIC {"step": "1", "loss": 1}',  # a step that is not an integer
        'TCL_METRIC {"step": true, "loss": 1}',
        'TCL_METRIC {"step": 1.5, "loss": 1}',
        'TCL_METRIC {"kind": 3, "loss": 1}',
        'TCL_METRIC {"loss": NaN}',  # non-finite only: no value
        'TCL_METRIC {"loss": Infinity}',
        ' TCL_METRIC {"loss": 1}',  # the prefix starts the line
        'tcl_metric {"loss": 1}',
        'TCL_METRIC: {"loss": 1}',
        'loss TCL_METRIC {"loss": 1}',
        "",
    ],
)
def test_anything_else_is_not_a_metric(line: str) -> None:
    assert parse_line(line) is None


def test_limits() -> None:
    assert parse_line(format_line({"kind": "k" * (MAX_KIND_CHARS + 1), "x": 1})) is None
    many = {f"v{i}": float(i) for i in range(MAX_VALUES + 1)}
    assert parse_line(format_line(many)) is None
    assert parse_line(format_line(dict(list(many.items())[:MAX_VALUES]))) is not None
    assert parse_line(format_line({"n" * 129: 1.0})) is None  # a name too long: no value
    padded = PREFIX + '{"loss": 1' + " " * (MAX_LINE_BYTES - len(PREFIX) - 12) + "}"
    assert len(padded) == MAX_LINE_BYTES - 1 and parse_line(padded) is not None
    assert parse_line(padded[:-1] + "  }") is None  # past the line limit: a log line
    assert parse_line(PREFIX + '{"loss": 1}') is not None


def test_a_non_finite_value_is_dropped_the_rest_kept() -> None:
    rec = parse_line('TCL_METRIC {"loss": NaN, "lr": 0.1, "step": 2}')
    assert rec == MetricRecord(step=2, kind="", values={"lr": 0.1})


def test_format_line_refuses_nan() -> None:
    with pytest.raises(ValueError):
        format_line({"loss": float("nan")})


def test_a_phase_line_is_a_phase_and_nothing_else_is() -> None:
    """What ``tcl.jobs.mark`` prints: a phase of the attempt's start; a line with more keys,
    or a phase tcl does not know, is no phase (an unknown one stays a log line)."""
    assert phase_line(Phase.COMPILED) == 'TCL_METRIC {"phase":"compiled"}'
    assert parse_line(phase_line(Phase.COMPILED) + "\n") is Phase.COMPILED
    assert parse_line('TCL_METRIC {"phase": "warmed_up"}') is None
    assert parse_line('TCL_METRIC {"phase": "compiled", "step": 3}') == MetricRecord(3, "", {})
    assert [p.value for p in Phase][:3] == ["runner_ready", "env_ready", "job_started"]
