"""The retry policy (tcl.control.lifecycle.retry_policy.decide): each branch, and the backoff."""

from __future__ import annotations

import pytest

from tcl.control.lifecycle.retry_policy import Decision, RetryPolicy, Verdict, decide
from tcl.control.states import RunState

THREE = RetryPolicy(max_attempts=3, backoff_s=10, backoff_max_s=25)


def _decide(
    policy: RetryPolicy = THREE,
    failures: int = 0,
    state: RunState = RunState.FAILED,
    exit_code: int | None = 1,
    message: str = "",
    preempted: bool = False,
) -> Decision:
    return decide(policy, failures, state, exit_code, message, preempted)


def test_a_success_is_done_whatever_came_before() -> None:
    assert _decide(failures=2, state=RunState.SUCCEEDED, exit_code=0).verdict is Verdict.DONE


def test_a_preemption_is_placed_again_now_and_is_no_failure() -> None:
    d = _decide(failures=2, state=RunState.TERMINATED, exit_code=None, preempted=True)
    assert d == Decision(Verdict.REQUEUE, 0.0, "preempted (terminated); placing it again")


def test_a_run_stopped_by_its_user_ends_as_it_is() -> None:
    d = _decide(state=RunState.TERMINATED, exit_code=143, message="stopped by the user")
    assert d == Decision(Verdict.FAILED, why="stopped by the user")


def test_a_failed_attempt_is_retried_with_a_doubling_capped_backoff() -> None:
    first = _decide(failures=0)
    assert first.verdict is Verdict.RETRY and first.delay_s == 10.0
    assert first.why == "attempt 1 of 3 failed (exit code 1); retry in 10 s"
    second = _decide(failures=1)
    assert second.verdict is Verdict.RETRY and second.delay_s == 20.0
    assert [THREE.delay_s(n) for n in (1, 2, 3, 4)] == [10.0, 20.0, 25.0, 25.0]


def test_attempts_used_up_end_the_run() -> None:
    assert _decide(failures=2) == Decision(Verdict.FAILED, why="exit code 1; 3 attempts failed")
    once = RetryPolicy()  # the default: one attempt, no retry
    # its one attempt failed: the reason alone, no "1 attempts failed" (issue 31)
    assert _decide(once, exit_code=2) == Decision(Verdict.FAILED, why="exit code 2")


@pytest.mark.parametrize(("code", "verdict"), [(3, Verdict.RETRY), (4, Verdict.FAILED)])
def test_only_listed_exit_codes_retry(code: int, verdict: Verdict) -> None:
    policy = RetryPolicy(max_attempts=3, exit_codes=[3])
    d = _decide(policy, exit_code=code)
    assert d.verdict is verdict
    if verdict is Verdict.FAILED:
        assert d.why == f"exit code {code}"  # not listed: no attempt count


def test_an_infrastructure_failure_retries_unless_the_policy_says_not() -> None:
    msg = "the container could not start"
    assert _decide(exit_code=None, message=msg).verdict is Verdict.RETRY
    strict = RetryPolicy(max_attempts=3, infra=False)
    assert _decide(strict, exit_code=None, message=msg) == Decision(Verdict.FAILED, why=msg)
