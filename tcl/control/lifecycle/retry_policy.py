"""Retry policy: what a run's end means for its next attempt.

- succeeded → done;
- preempted (its host stopped it with reason preemption, or lost it) → placed again, not
  counted as a failure;
- failed with a listed exit code, or for an infrastructure reason (no exit code: the host or
  its container failed) → placed again after an exponential backoff, while fewer than
  ``max_attempts`` attempts failed;
- anything else (stopped by the user, a code not listed) → ends as it is.

The same policy serves a matrix's entries and a single ``tcl submit --retry`` run. Attempts keep
the run id, so a ``tcl.jobs`` trainer resumes from its latest checkpoint.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from tcl.control.states import RunState


class RetryPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_attempts: int = Field(default=1, ge=1, le=100)  # attempts that may fail, in all
    exit_codes: list[int] = Field(default_factory=list)  # empty: any non-zero code retries
    infra: bool = True  # retry a run that ended with no exit code (host or container failure)
    backoff_s: float = Field(default=10.0, ge=0.0)  # first wait; doubles per failed attempt
    backoff_max_s: float = Field(default=600.0, ge=0.0)

    def delay_s(self, failures: int) -> float:
        """Wait before the attempt after ``failures`` failed ones (1, 2, ...)."""
        return float(min(self.backoff_max_s, self.backoff_s * 2 ** max(0, failures - 1)))


class Verdict(enum.Enum):
    DONE = "done"  # the run succeeded
    FAILED = "failed"  # the run ended for good (failed, stopped, attempts used up)
    RETRY = "retry"  # place it again after ``delay_s``; one more failed attempt
    REQUEUE = "requeue"  # place it again now; not a failure (preempted)


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    delay_s: float = 0.0
    why: str = ""


def decide(
    policy: RetryPolicy,
    failures: int,
    state: RunState,
    exit_code: int | None,
    message: str,
    preempted: bool,
) -> Decision:
    """``failures``: attempts of this run that failed before the one that just ended."""
    ended = message or (f"exit code {exit_code}" if exit_code is not None else state.value)
    if state is RunState.SUCCEEDED:
        return Decision(Verdict.DONE)
    if preempted:
        return Decision(Verdict.REQUEUE, 0.0, f"preempted ({ended}); placing it again")
    if state is not RunState.FAILED:
        return Decision(Verdict.FAILED, why=ended)  # stopped by the user: not retried
    listed = exit_code is not None and (not policy.exit_codes or exit_code in policy.exit_codes)
    infra = exit_code is None and policy.infra
    failed_now = failures + 1
    if (listed or infra) and failed_now < policy.max_attempts:
        delay = policy.delay_s(failed_now)
        why = f"attempt {failed_now} of {policy.max_attempts} failed ({ended}); "
        why += f"retry in {delay:g} s"
        return Decision(Verdict.RETRY, delay, why)
    if (listed or infra) and failed_now > 1:  # one attempt of one allowed: nothing to add
        return Decision(Verdict.FAILED, why=f"{ended}; {failed_now} attempts failed")
    return Decision(Verdict.FAILED, why=ended)
