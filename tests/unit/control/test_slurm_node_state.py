"""A SLURM node's state from its runner's status and SLURM's row: a job SLURM's SIGTERM ended
waits for SLURM's own word (why it ended), which says whether tcl places it again."""

from __future__ import annotations

from tcl.control.backends.slurm.backend import _node_state, taken_back
from tcl.control.backends.slurm.handle import SlurmHandle, SlurmLogin
from tcl.control.backends.slurm.parse import JobRow
from tcl.control.states import RunState

H = SlurmHandle(host="hpc", login=SlurmLogin(ssh="login"), job_id="7", run_dir="/w/tcl/runs/r/0")


def _row(state: str) -> JobRow:
    return JobRow("7", state, "None", 0, "node1")


def test_a_signalled_job_waits_for_slurm_s_final_word() -> None:
    stopped = {"state": "terminated", "exit_code": 143}
    # the runner ended (SIGTERM), SLURM still completing it: not final yet (a preemption in
    # CANCEL mode, a time limit and a scancel differ only in what SLURM says next)
    state, code, why = _node_state(H, 0, _row("COMPLETING"), stopped)
    assert (state, code) == (RunState.RUNNING, None) and "ending" in why
    for final in ("PREEMPTED", "CANCELLED"):
        assert _node_state(H, 0, _row(final), stopped)[0] is RunState.TERMINATED
    # a time limit is the job's own end: a failure (--retry counts it; bounded resubmits)
    state, code, why = _node_state(H, 0, _row("TIMEOUT"), stopped)
    assert (state, code) == (RunState.FAILED, 143) and "time limit" in why
    # SLURM forgot the job: the runner's word stands
    assert _node_state(H, 0, None, stopped)[0] is RunState.TERMINATED


def test_a_job_that_exited_by_itself_ends_at_once() -> None:
    done = {"state": "succeeded", "exit_code": 0}
    assert _node_state(H, 0, _row("COMPLETING"), done) == (RunState.SUCCEEDED, 0, "")
    failed = {"state": "failed", "exit_code": 3}
    assert _node_state(H, 0, _row("COMPLETING"), failed) == (RunState.FAILED, 3, "")


def test_what_slurm_took_back_is_placed_again_a_time_limit_is_a_failure() -> None:
    """Issue 32's resubmits: a CANCEL-mode preemption and a failed (or unbooted) node are the
    cluster's doing (placed again, not counted); a time limit and a scancel are not."""
    for word in ("PREEMPTED", "NODE_FAIL", "BOOT_FAIL"):
        assert taken_back(RunState.TERMINATED, _row(word)), word
    for word in ("TIMEOUT", "CANCELLED", "COMPLETED", "FAILED"):
        assert not taken_back(RunState.FAILED, _row(word)), word
    assert not taken_back(RunState.RUNNING, _row("NODE_FAIL"))  # not ended yet
    assert not taken_back(RunState.TERMINATED, None)  # SLURM forgot it: no word
