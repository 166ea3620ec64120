"""Why an attempt ended: read from its host's final state, shown by `tcl ps`."""

from __future__ import annotations

import dataclasses
import time

import pytest

from tcl.control.runlisting import state_text
from tcl.control.runrequest import RunRequest
from tcl.control.states import AttemptCause, RunState
from tcl.control.store import Attempt, Run


@pytest.mark.parametrize(
    ("state", "preempted", "cause"),
    [
        (RunState.SUCCEEDED, False, AttemptCause.EXIT),
        (RunState.FAILED, False, AttemptCause.EXIT),
        (RunState.TERMINATED, False, AttemptCause.STOPPED),
        (RunState.TERMINATED, True, AttemptCause.PREEMPTED),
        (RunState.FAILED, True, AttemptCause.PREEMPTED),  # killed by the preemption's signal
    ],
)
def test_the_cause_of_a_host_s_final_state(
    state: RunState, preempted: bool, cause: AttemptCause
) -> None:
    assert AttemptCause.of_end(state, preempted) is cause


def _run(state: RunState) -> Run:
    now = time.time()
    return Run("r-1", "r", state, "gpu1", "ssh", RunRequest(), None, None, "", now, now)


def _attempt(n: int, state: RunState, cause: AttemptCause | None) -> Attempt:
    return Attempt("r-1", n, "gpu1", "ssh", {}, state, 0, 0.0, cause)


def test_ps_says_which_attempt_and_why_the_one_before_ended() -> None:
    run = _run(RunState.RUNNING)
    assert state_text(run, None, [_attempt(0, RunState.RUNNING, None)]) == "running"
    lost = [
        _attempt(0, RunState.TERMINATED, AttemptCause.PREEMPTED),
        _attempt(1, RunState.TERMINATED, AttemptCause.NODE_LOST),
        _attempt(2, RunState.RUNNING, None),
    ]
    assert state_text(run, None, lost) == "running · attempt 2 after node lost"
    # an attempt recorded before causes were kept
    old = [_attempt(0, RunState.FAILED, None), _attempt(1, RunState.RUNNING, None)]
    assert state_text(run, None, old) == "running · attempt 1"


def test_ps_says_why_a_run_ended_beside_its_state() -> None:
    """The job's last word (or tcl's reason) in the STATE column, not only a code (issue 31)."""
    oom = "exit code 3: RuntimeError: CUDA out of memory"
    failed = dataclasses.replace(_run(RunState.FAILED), exit_code=3, message=oom)
    assert state_text(failed, None) == f"failed: {oom}"
    stopped = dataclasses.replace(_run(RunState.TERMINATED), message="stopped by user")
    assert state_text(stopped, None) == "terminated: stopped by user"
    long = dataclasses.replace(failed, message="exit code 1: " + "x" * 300)
    assert state_text(long, None).endswith("x…") and len(state_text(long, None)) < 120
    assert state_text(_run(RunState.SUCCEEDED), None) == "succeeded"
