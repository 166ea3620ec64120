"""``tcl matrix status|ls|export`` through typer's CliRunner (mounted on a test app, as the
``tcl matrix`` sub-app will mount them), on a real SQLite store in the state dir."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tcl.cli.matrix_show import bar, cmd_export, cmd_ls, cmd_status
from tcl.control.runrequest import RunRequest
from tcl.control.store import Store
from tcl.control.sweep.model import EntryState
from tcl.control.sweep.queue import NewEntry, SweepQueue
from tests.unit.control.test_cli import home

__all__ = ["home"]  # the CLI tests' fixture: HOME, state dir, no config, no colour

runner = CliRunner()
app = typer.Typer()
app.command("status")(cmd_status)
app.command("ls")(cmd_ls)
app.command("export")(cmd_export)


@pytest.fixture
def seeded(home: Path) -> Path:
    """Matrix ``lrs``: 4 entries, 1 done, 1 failed, 1 running, 1 queued; matrix ``empty``."""
    (home / "state").mkdir(exist_ok=True)
    store = Store(f"sqlite:///{home / 'state' / 'tcl.db'}")
    q = SweepQueue(store)
    q.add("lrs", {"argv": ["true"]}, [NewEntry(f"lr={lr}", {"lr": lr}) for lr in (1, 2, 3, 4)])
    q.add("empty", {"argv": ["true"]}, [])
    held = {e.job_id: e.id for e in q.claim("s", limit=3, lease_s=600, matrices=["lrs"])}
    for entry_id in held.values():
        assert q.started("s", entry_id)
    assert q.finish("s", held["lr=1"], EntryState.DONE)
    assert q.finish("s", held["lr=2"], EntryState.FAILED, "Traceback\n  ...\nValueError: nan loss")
    run_id = q.entry(held["lr=2"]).run_id
    assert run_id is not None
    store.create_run(run_id, "lrs-lr=2", RunRequest(argv=["true"]))
    store.set_placement(run_id, "pod-0", "ssh", None)
    store.add_attempt(run_id, "pod-0", "ssh")
    q.close()
    store.close()
    return home


def test_status_of_one_matrix(seeded: Path) -> None:
    res = runner.invoke(app, ["status", "lrs"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0] == "lrs: 4 entries"
    assert lines[1].split() == [
        "queued",
        "1",
        "claimed",
        "0",
        "running",
        "1",
        "done",
        "1",
        "failed",
        "1",
        "cancelled",
        "0",
    ]
    assert lines[2].startswith(f"  {bar(0.5)} 2/4 (50%)  ")
    assert "runs/h  ETA " in lines[2]
    assert lines[3:] == ["  failed (1):", "    lr=2  ValueError: nan loss"]


def test_status_of_all_and_json(seeded: Path) -> None:
    res = runner.invoke(app, ["status"])
    assert res.exit_code == 0, res.output
    assert "lrs: 4 entries" in res.stdout and "empty: 0 entries" in res.stdout
    res = runner.invoke(app, ["status", "lrs", "--json"])
    data = json.loads(res.stdout)
    assert data["name"] == "lrs" and data["total"] == 4 and data["counts"]["failed"] == 1
    assert data["failures"][0]["error"] == "ValueError: nan loss"
    res = runner.invoke(app, ["status", "--json"])
    assert [m["name"] for m in json.loads(res.stdout)] == ["lrs", "empty"]


def test_unknown_matrix_is_one_line(seeded: Path) -> None:
    for argv in (["status", "nope"], ["export", "nope"]):
        res = runner.invoke(app, argv)
        assert res.exit_code == 2
        assert "error: no matrix 'nope' (see `tcl matrix ls`)" in res.stderr
        assert "Traceback" not in res.output


def test_ls(seeded: Path) -> None:
    res = runner.invoke(app, ["ls"])
    assert res.exit_code == 0, res.output
    rows = [line.split() for line in res.stdout.splitlines()]
    assert rows[0] == [
        "NAME",
        "ENTRIES",
        "QUEUED",
        "RUNNING",
        "DONE",
        "FAILED",
        "CANCELLED",
        "CREATED",
    ]
    assert rows[1][:7] == ["lrs", "4", "1", "1", "1", "1", "0"]
    assert rows[2][:7] == ["empty", "0", "0", "0", "0", "0", "0"]
    data = json.loads(runner.invoke(app, ["ls", "--json"]).stdout)
    assert data[0]["name"] == "lrs" and data[0]["entries"] == 4
    assert data[0]["counts"] == {
        "queued": 1,
        "claimed": 0,
        "running": 1,
        "done": 1,
        "failed": 1,
        "cancelled": 0,
    }


def test_nothing_yet(home: Path) -> None:
    res = runner.invoke(app, ["ls"])
    assert res.exit_code == 0 and "no matrices" in res.stderr
    assert json.loads(runner.invoke(app, ["ls", "--json"]).stdout) == []


def test_export_to_stdout_and_file(seeded: Path) -> None:
    res = runner.invoke(app, ["export", "lrs"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert list(data) == ["lr=1", "lr=2", "lr=3", "lr=4"]
    assert res.stdout.startswith('{\n  "lr=1": {\n    "state": "done",')  # pretty, in order
    assert data["lr=2"]["host"] == "pod-0" and data["lr=2"]["attempts"] == 1
    assert data["lr=2"]["finished_at"].endswith("Z") and data["lr=4"]["state"] == "queued"
    target = seeded / "out" / "matrix_status.json"
    res = runner.invoke(app, ["export", "lrs", "-o", str(target)])
    assert res.exit_code == 0, res.output
    assert "wrote 4 entries to" in res.stderr
    assert json.loads(target.read_text()) == data


def test_bar() -> None:
    assert bar(0.5, 10) == "[#####-----]"
    assert bar(0.0, 4) == "[----]" and bar(1.5, 4) == "[####]"
