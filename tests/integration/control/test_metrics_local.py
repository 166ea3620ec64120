"""Metrics travel with the logs, on the local default (no config): a job's TCL_METRIC lines are
`tcl metrics` points, never log lines; a malformed one stays a log line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.tclcli import stop_local_shim_and_tasks

from .test_e2e_local import _local_env, _tcl

JOB = """\
import json, sys, time
print("starting", flush=True)
for step in range(1, 5):
    time.sleep(0.2)
    print("TCL_METRIC " + json.dumps({"step": step, "kind": "train", "loss": 1 / step}))
    print(f"step {step} done", flush=True)
print("TCL_METRIC " + json.dumps({"step": 4, "kind": "val", "val_loss": 0.5, "acc": 0.75}))
print("TCL_METRIC nope", flush=True)
print("to stderr", file=sys.stderr, flush=True)
print("finished")
"""
LOG_LINES = (
    "starting\nstep 1 done\nstep 2 done\nstep 3 done\nstep 4 done\nTCL_METRIC nope\nfinished\n"
)


def test_metric_lines_become_points_and_not_log_lines(tmp_path: Path) -> None:
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "job.py").write_text(JOB)
    env = _local_env(home)
    try:
        res = _tcl(env, work, "submit", "--", "python", "job.py")  # followed to its end
        assert res.returncode == 0, res.stderr
        assert res.stdout == LOG_LINES  # what it printed as it ran: no metric line
        (run,) = json.loads(_tcl(env, work, "ps", "-a", "--json").stdout)
        run_id = run["run_id"]
        res = _tcl(env, work, "metrics", run_id, "--json")
        assert res.returncode == 0, res.stderr
        points = json.loads(res.stdout)
        assert [(p["step"], p["kind"], p["values"]) for p in points] == [
            (1, "train", {"loss": 1.0}),
            (2, "train", {"loss": 0.5}),
            (3, "train", {"loss": 1 / 3}),
            (4, "train", {"loss": 0.25}),
            (4, "val", {"acc": 0.75, "val_loss": 0.5}),
        ]
        assert [p["seq"] for p in points] == sorted(p["seq"] for p in points)
        assert {(p["attempt"], p["node"]) for p in points} == {(0, 0)}
        res = _tcl(env, work, "logs", run_id)
        assert res.returncode == 0, res.stderr
        assert res.stdout == LOG_LINES
        assert "to stderr" in res.stderr and "TCL_METRIC" not in res.stderr
        res = _tcl(env, work, "metrics", run_id, "--kind", "val")
        assert res.returncode == 0, res.stderr
        assert [line.split() for line in res.stdout.splitlines()] == [
            ["STEP", "KIND", "acc", "val_loss"],
            ["4", "val", "0.75", "0.5"],
        ]
        # its start, phase by phase (a plain script: the phases its runner sees), and goodput:
        # its steps took 0.6 s of a run of seconds
        (run,) = json.loads(_tcl(env, work, "ps", "-a", "--json").stdout)
        (attempt,) = run["attempts"]
        phases = [g["phase"] for g in attempt["start"]]
        assert phases == ["waited", "runner_ready", "job_started", "first_step"], attempt
        took = [g["seconds"] for g in attempt["start"]]
        assert all(s >= 0 for s in took) and attempt["to_first_step_s"] == pytest.approx(
            sum(took), abs=0.01
        )
        assert 0.01 < run["goodput"] < 0.6, run
        res = _tcl(env, work, "metrics", run_id)
        assert res.returncode == 0, res.stderr
        assert f"time to first step (s); goodput {run['goodput']:.1%}" in res.stdout
    finally:
        stop_local_shim_and_tasks(home / "state" / "local-shim")
