"""A run's end under its retry policy: placed back in the queue, or placed again.

:func:`retry_after_end` runs where a pull sees the run's last attempt end: with a policy that
says so, the attempt ends (its host resources freed) and the run waits (``waiting_retry``)
instead of ending, its failures counted (a preemption is not one). :func:`place_waiting`
places such a run again once its backoff passed: the same run id as its next attempt, so a
``tcl.jobs`` trainer resumes from its latest checkpoint. The run's owner (its run controller,
whose pulls place it when due) calls it; for a sweep's run, its scheduler does (the entry goes
back to the queue meanwhile).
"""

from __future__ import annotations

import contextlib

from tcl.control.errors import (
    AgentError,
    NoPlacementError,
    SshConnectError,
    TclError,
)
from tcl.control.lifecycle.release import release_attempt
from tcl.control.lifecycle.retry_policy import Verdict, decide
from tcl.control.retries import policy_of
from tcl.control.service import Control
from tcl.control.states import AttemptCause, Move, RunState, move
from tcl.control.store import Attempt, Run

NO_PLACE_RETRY_S = 2.0  # nothing free now: look again after this long (not a failure)


async def retry_after_end(
    ctl: Control,
    run: Run,
    att: Attempt,
    state: RunState,
    exit_code: int | None,
    why: str,
    cause: AttemptCause,
) -> str | None:
    """The run's attempt ended in ``state``. With a policy that retries it, end the attempt,
    put the run back in the queue and return None; else return the message its end should
    carry (``why``, or the policy's account of attempts used up)."""
    policy = policy_of(run)
    if policy is None:
        return why
    prior = ctl.retries.get(run.id)
    current = ctl.store.get_run(run.id)
    if move(current.state, RunState.WAITING_RETRY) is not Move.APPLY:
        return why  # stopped here meanwhile
    if prior is not None and prior.waiting and not waiting_for_retry(ctl, current):
        # decided and counted already, by an owner killed before it moved the run: carried
        # out, not decided (nor counted) again
        why_now = prior.why
    else:
        preempted = cause in (AttemptCause.PREEMPTED, AttemptCause.NODE_LOST)
        d = decide(policy, prior.failures if prior else 0, state, exit_code, why, preempted)
        if d.verdict not in (Verdict.RETRY, Verdict.REQUEUE):
            return d.why or why
        ctl.retries.wait(run.id, d.delay_s, d.verdict is Verdict.RETRY, d.why)
        why_now = d.why
    if move(att.state, state) is Move.APPLY:
        ctl.store.update_attempt(run.id, att.attempt, state=state, cause=cause)
    ctl.store.set_state(run.id, RunState.WAITING_RETRY, message=why_now, exit_code=exit_code)
    # freed only once the run moved: an owner killed before that finds the task (and the
    # job's end) again, never a run `running` whose task is gone
    with contextlib.suppress(TclError):
        await release_attempt(ctl, ctl.store.latest_attempt(run.id) or att, state)
    return None


async def place_waiting(ctl: Control, run_id: str) -> bool:
    """Place a run that waits for its retry as its next attempt; True when placed. Nothing
    free: it keeps waiting (looked at again shortly). Any other refusal ends the run."""
    from tcl.control.lifecycle.submit import relaunch

    ctl.retries.placed(run_id)  # before the run moves on: no reader sees it placed and waiting
    before = ctl.store.latest_attempt(run_id)
    try:
        await relaunch(ctl, run_id)
    except (NoPlacementError, AgentError, SshConnectError) as e:
        # nothing free now, a host that refused it for now (a queued resource still waiting)
        # or dropped the connection mid-placement (its launch undid its task): not the run's
        # fault, it waits again
        end_failed_placement(ctl, run_id, before)
        ctl.retries.postpone(run_id, NO_PLACE_RETRY_S, str(e).splitlines()[0])
        return False
    except TclError as e:
        why = f"placing it again failed: {str(e).splitlines()[0]}"
        if move(ctl.store.get_run(run_id).state, RunState.FAILED) is Move.APPLY:
            ctl.store.set_state(run_id, RunState.FAILED, message=why)
        return False
    return True


def waiting_for_retry(ctl: Control, run: Run) -> bool:
    """The run's last attempt ended and it waits to be placed again (its retry policy put it
    back in the queue, or its host lost it and nothing could take it at once)."""
    return run.state is RunState.WAITING_RETRY


def end_failed_placement(ctl: Control, run_id: str, before: Attempt | None) -> None:
    """A placement that failed after recording its attempt (its launch undid what it made):
    that attempt ends ``terminated``, so the next one is not mistaken for it."""
    att = ctl.store.latest_attempt(run_id)
    newer = att is not None and (before is None or att.attempt > before.attempt)
    if att is not None and newer and not att.state.is_final:
        ctl.store.update_attempt(
            run_id, att.attempt, state=RunState.TERMINATED, cause=AttemptCause.PLACEMENT_FAILED
        )
