"""A hung job on the local default (issue 33): its runner finds it hung, the attempt ends with
the cause `hung`, its stacks are in `tcl logs`, and `--retry` places it again; the next
attempt (as a trainer would after resuming from its checkpoint) finishes."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.tclcli import run_tcl, stop_local_shim_and_tasks, user_env

JOB = """
import os, time
attempt = int(os.environ["TCL_ATTEMPT"])
for step in range(5):
    print('TCL_METRIC {"step": %d, "kind": "heartbeat"}' % step, flush=True)
    time.sleep(0.2)

def all_reduce():
    time.sleep(600)  # a peer that never answers

if attempt == 0:
    all_reduce()
print("finished on attempt", attempt, flush=True)
"""


def test_a_hung_attempt_is_marked_hung_and_retried(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "job.py").write_text(JOB)
    env = user_env(home, drop=("TCL_CONFIG", "TCL_DB_URL"))
    argv = ["submit", "--retry", "2", "--retry-backoff-s", "0.1", "--env", "TCL_HANG_FLOOR_S=1"]
    try:
        res = run_tcl([*argv, "--", "python3", "job.py"], env, work, timeout=180)
        assert "finished on attempt 1" in res.stdout, res.stdout + res.stderr
        (run,) = json.loads(run_tcl(["ps", "-a", "--json"], env, work).stdout)
        assert run["state"] == "succeeded"
        assert [a["cause"] for a in run["attempts"]] == ["hung", "exit"], run["attempts"]
        shown = run_tcl(["logs", run["run_id"]], env, work)
        logs = shown.stdout + shown.stderr  # the job's stderr (its stacks) goes to stderr
        assert "the job looks hung" in logs and "in all_reduce" in logs, logs
    finally:
        stop_local_shim_and_tasks(home / "state" / "local-shim")
