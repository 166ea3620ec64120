"""``tcl metrics`` through typer's CliRunner: table, JSON, --kind, no points, unknown run; and
metric events never shown as log lines by ``tcl logs``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tcl.cli.app import app
from tcl.control.logcache import LogCache
from tcl.control.runrequest import RunRequest
from tcl.control.states import RunState
from tcl.control.store import Store
from tcl.runner.api import Event, EventKind, LogStream, RunnerState
from tests.unit.control.conftest import cli_home

runner = CliRunner()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cli_home(tmp_path, monkeypatch)
    (tmp_path / "state" / "logs").mkdir(parents=True)
    return tmp_path


def _seed(home: Path, run_id: str, metrics: list[str]) -> None:
    """A finished run on a host gone from the config, its events kept locally only."""
    store = Store(f"sqlite:///{home / 'state' / 'tcl.db'}")
    store.create_run(run_id, run_id.split("-")[0], RunRequest(argv=["python", "t.py"]))
    store.set_state(run_id, RunState.PROVISIONING)
    store.set_placement(run_id, "gone-host", "ssh", "0" * 64)
    store.add_attempt(run_id, "gone-host", "ssh", {"task_id": "t", "runner_port": 1})
    store.set_state(run_id, RunState.RUNNING)
    store.set_state(run_id, RunState.SUCCEEDED, exit_code=0)
    store.close()
    events = [Event(seq=1, ts=10.0, kind=EventKind.LOG, stream=LogStream.STDOUT, data="start\n")]
    for data in metrics:
        events.append(
            Event(
                seq=len(events) + 1,
                ts=10.0 + len(events),
                kind=EventKind.METRIC,
                stream=LogStream.STDOUT,
                data=data,
            )
        )
    events.append(
        Event(
            seq=len(events) + 1, ts=99.0, kind=EventKind.LOG, stream=LogStream.STDOUT, data="done\n"
        )
    )
    events.append(
        Event(
            seq=len(events) + 1,
            ts=99.5,
            kind=EventKind.STATE,
            state=RunnerState.SUCCEEDED,
            exit_code=0,
        )
    )
    LogCache(run_id, home / "state" / "logs").append(events)


POINTS = [
    '{"kind":"train","loss":2.5,"lr":0.001,"step":1}',
    '{"kind":"train","loss":2.25,"step":2}',
    '{"kind":"val","step":2,"val_loss":3.125}',
]


def test_metrics_table_json_and_kind(home: Path) -> None:
    _seed(home, "train-aaaaaa", POINTS)
    res = runner.invoke(app, ["metrics", "train"])
    assert res.exit_code == 0, res.output
    rows = [line.split() for line in res.stdout.splitlines()]
    assert rows == [
        ["STEP", "KIND", "loss", "lr", "val_loss"],
        ["1", "train", "2.5", "0.001"],
        ["2", "train", "2.25"],
        ["2", "val", "3.125"],
    ]
    res = runner.invoke(app, ["metrics", "train-a", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == [
        {
            "seq": 1,
            "attempt": 0,
            "node": 0,
            "ts": 11.0,
            "step": 1,
            "kind": "train",
            "values": {"loss": 2.5, "lr": 0.001},
        },
        {
            "seq": 2,
            "attempt": 0,
            "node": 0,
            "ts": 12.0,
            "step": 2,
            "kind": "train",
            "values": {"loss": 2.25},
        },
        {
            "seq": 3,
            "attempt": 0,
            "node": 0,
            "ts": 13.0,
            "step": 2,
            "kind": "val",
            "values": {"val_loss": 3.125},
        },
    ]
    res = runner.invoke(app, ["metrics", "train", "--kind", "val", "--json"])
    assert [p["seq"] for p in json.loads(res.stdout)] == [3]
    res = runner.invoke(app, ["metrics", "train", "--kind", "nope"])
    assert res.exit_code == 0 and res.stdout == ""
    assert "has no metric points of kind 'nope'" in res.stderr
    # the logs show the job's lines and none of its metric events
    res = runner.invoke(app, ["logs", "train"])
    assert res.exit_code == 0 and res.stdout == "start\ndone\n"


def test_no_points_is_a_message_and_unknown_run_an_error(home: Path) -> None:
    _seed(home, "quiet-bbbbbb", [])
    res = runner.invoke(app, ["metrics", "quiet"])
    assert res.exit_code == 0 and res.stdout == ""
    assert "run quiet-bbbbbb has no metric points" in res.stderr
    res = runner.invoke(app, ["metrics", "quiet", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout) == []
    res = runner.invoke(app, ["metrics", "nope"])
    assert res.exit_code == 1 and "no run matches 'nope'" in res.stderr
    assert "Traceback" not in res.output


def test_a_metric_event_is_never_printed_as_a_log_line(capsys: pytest.CaptureFixture[str]) -> None:
    """What `tcl submit`, `tcl logs -f` and a `tcl serve` stream print each event with."""
    from tcl.cli.render import print_event

    print_event(
        Event(seq=1, ts=0.0, kind=EventKind.METRIC, stream=LogStream.STDOUT, data=POINTS[0])
    )
    print_event(Event(seq=2, ts=0.0, kind=EventKind.LOG, stream=LogStream.STDOUT, data="x\n"))
    assert capsys.readouterr().out == "x\n"


def test_a_multi_node_runs_table_says_whose_point_it_is(home: Path) -> None:
    _seed(home, "wide-cccccc", POINTS[:1])
    LogCache("wide-cccccc", home / "state" / "logs").append(
        [Event(seq=1, ts=20.0, kind=EventKind.METRIC, stream=LogStream.STDOUT, data=POINTS[1])],
        node=1,
        nodes=2,
    )
    res = runner.invoke(app, ["metrics", "wide"])
    assert res.exit_code == 0, res.output
    assert [line.split() for line in res.stdout.splitlines()] == [
        ["STEP", "KIND", "NODE", "loss", "lr"],
        ["1", "train", "0", "2.5", "0.001"],
        ["2", "train", "1", "2.25"],
    ]
