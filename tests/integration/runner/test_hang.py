"""Hang detection (issue 33): a job that reported steps and then stops making progress is
found within max(factor x its median step, floor), its stacks dumped into its log, and it ends
failed (134) for a retry policy to place again; a slow but steady job and one that reports no
step are never flagged. Real runners, real processes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tcl.runner.api import JobSpec, LogStream, RunnerState
from tcl.runner.errors import InvalidSpec
from tcl.runner.service import Runner, RunnerConfig

HUNG = """
import time
from tcl.jobs import heartbeat

def wait_for_the_collective():
    time.sleep(600)  # where it hangs

for step in range(6):
    heartbeat(step)
    time.sleep(0.2)
wait_for_the_collective()
"""
STEADY = """
import time
from tcl.jobs import heartbeat
for step in range(8):
    heartbeat(step)
    time.sleep(0.3)
"""


def _run(tmp_path: Path, code: str, env: dict[str, str]) -> tuple[Runner, str, float]:
    runner = Runner(RunnerConfig(state_dir=tmp_path / "state", stop_grace_s=5))
    runner.submit(JobSpec(run_id="r", argv=[sys.executable, "-c", code], env=env))
    t0 = time.monotonic()
    runner.run()
    assert runner.wait(120), "the job did not end"
    took = time.monotonic() - t0
    events, _ = runner.log.read(0, 100_000)
    text = "".join(
        e.data or ""
        for e in events
        if e.stream in (LogStream.STDOUT, LogStream.STDERR, LogStream.RUNNER)
    )
    runner.close()
    return runner, text, took


def test_a_job_that_stops_stepping_is_dumped_and_fails(tmp_path: Path) -> None:
    runner, log, took = _run(tmp_path, HUNG, {"TCL_HANG_FLOOR_S": "1"})
    assert runner.state is RunnerState.FAILED and runner.machine.exit_code == 134, log
    assert "the job looks hung" in log and "stopped as hung" in log
    # its stacks, from Python's fault handler: where it hung
    assert "in wait_for_the_collective" in log, log
    assert took < 30, took  # found in seconds (limit 1 s, polled each second), not 600


def test_a_slow_but_steady_job_and_a_silent_one_are_never_flagged(tmp_path: Path) -> None:
    runner, log, _ = _run(tmp_path / "steady", STEADY, {"TCL_HANG_FLOOR_S": "2"})
    assert runner.state is RunnerState.SUCCEEDED and "hung" not in log, log
    quiet = "import time; time.sleep(3)"  # no step ever: never judged, whatever the floor
    runner, log, _ = _run(tmp_path / "quiet", quiet, {"TCL_HANG_FLOOR_S": "0.5"})
    assert runner.state is RunnerState.SUCCEEDED and "hung" not in log, log


def test_hang_settings_are_checked_at_submit(tmp_path: Path) -> None:
    runner = Runner(RunnerConfig(state_dir=tmp_path / "state"))
    bad = JobSpec(run_id="r", argv=["true"], env={"TCL_HANG_FACTOR": "lots"})
    with pytest.raises(InvalidSpec, match="TCL_HANG_FACTOR='lots': a positive number"):
        runner.submit(bad)
    runner.close()
