"""metadata.json: the transition table, atomic writes, the heartbeat."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tcl.jobs.errors import JobsError
from tcl.jobs.status import Heartbeat, RunStatus, StatusFile
from tests.polling import wait_until


def test_transitions_and_fields(tmp_path: Path) -> None:
    path = tmp_path / "s" / "metadata.json"
    status = StatusFile(path)
    with pytest.raises(JobsError, match="not allowed"):
        status.set(RunStatus.COMPLETED)
    status.set(RunStatus.RUNNING, run_id="r")
    data = json.loads(path.read_text())
    assert data["status"] == "running" and data["run_id"] == "r" and data["version"] == 1
    status.set(RunStatus.PREEMPTED, exit_code=143)
    with pytest.raises(JobsError):
        status.set(RunStatus.COMPLETED)
    status.set(RunStatus.RUNNING)
    status.set(RunStatus.COMPLETED, exit_code=0)
    data = json.loads(path.read_text())
    assert data["status"] == "completed" and data["exit_code"] == 0 and data["ended_at"]
    assert not list(path.parent.glob(".*tmp"))


def test_heartbeat_touches_only_a_running_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    status = StatusFile(tmp_path / "metadata.json")
    status.set(RunStatus.RUNNING)
    before = status.data["heartbeat_at"]
    beats: list[float] = []
    touch = status.heartbeat

    def counted() -> None:
        touch()
        beats.append(time.monotonic())

    monkeypatch.setattr(status, "heartbeat", counted)
    beat = Heartbeat(status, interval_s=0.05)
    beat.start()
    wait_until(
        lambda: json.loads(status.path.read_text())["heartbeat_at"] > before,
        30,
        "a heartbeat of the running status",
    )
    status.set(RunStatus.FAILED, error="x")
    final = json.loads(status.path.read_text())
    seen = len(beats)
    wait_until(lambda: len(beats) >= seen + 2, 30, "two heartbeats after the run failed")
    beat.stop()
    assert json.loads(status.path.read_text()) == final
