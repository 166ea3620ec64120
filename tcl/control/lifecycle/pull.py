"""Pulling a run's events into the local log cache, through its backend; what a pull learns
moves the run on (its end, a retry, a requeue, a lost host placed again).

The local cache is the cursor: a pull asks each node for ``after = last seq kept of it`` and
appends only newer events, so a follow that loses its connection reconnects (jittered backoff)
and continues with no lost and no repeated line. The metric events among them are kept in the
state store as well (:mod:`tcl.control.metricstore`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tcl.control.backends.base import Handle, NodePage, worst_state
from tcl.control.backoff import backoff_s
from tcl.control.errors import (
    AgentError,
    AgentUnreachableError,
    NoPlacementError,
    SshConnectError,
    TclError,
)
from tcl.control.lifecycle.nodepages import (
    failed_node,
    first_failed,
    hung,
    job_pid,
    node_pages,
    node_state,
)
from tcl.control.lifecycle.release import release_attempt
from tcl.control.lifecycle.retry import (
    NO_PLACE_RETRY_S,
    end_failed_placement,
    place_waiting,
    retry_after_end,
    waiting_for_retry,
)
from tcl.control.logcache import KeptEvent, LogCache, kept_log
from tcl.control.service import Control
from tcl.control.states import AttemptCause, Move, RunState, move
from tcl.runner.api import EventKind, RunnerState

if TYPE_CHECKING:
    from tcl.control.store import Attempt, Run

STOP_GRACE_S = 10.0  # the watchdog's stop of a multi-node run's other nodes
# A dropped connection: a pull that failed with one of these may be tried again.
RETRYABLE = (AgentUnreachableError, SshConnectError)


@dataclass(frozen=True)
class PullResult:
    events: list[KeptEvent]  # new events, in order, already stored locally
    state: RunState
    more: bool
    # False when nothing was asked (an attempt that named nothing on a host yet, a lost node
    # left to be placed again elsewhere): the answer comes at once, its caller paces its pulls
    waited: bool = True


async def pull(
    ctl: Control,
    run: Run,
    wait_s: float = 0.0,
    release: bool = True,
    relaunch: bool = True,
    to_queue: bool = False,
) -> PullResult:
    """New events from every node, stored before being returned. ``release``: once the last
    event is kept, free the run's host resources here (else the caller does, :func:`release`).
    ``relaunch``: a run its host lost is placed again here (minutes, for a cloud node: not
    under `tcl ps`'s short timeout; a follower does it). ``to_queue``: a sweep's run its host
    lost waits to be placed again by its scheduler instead (its entry goes back to the queue)."""
    att = ctl.store.latest_attempt(run.id)
    if att is None or not att.handle:
        return PullResult([], run.state, False, waited=False)
    if waiting_for_retry(ctl, run):
        return await _retry_when_due(ctl, run, wait_s, relaunch)
    backend = ctl.backend_for(att)
    handle = ctl.handle(att)
    if handle.released and run.state.is_final:
        return PullResult([], run.state, False)  # every event is kept locally already
    cache = kept_log(run.id)
    pages = await node_pages(backend, handle, att, cache, wait_s)
    fresh: list[KeptEvent] = []
    for node in sorted(pages):
        fresh += cache.append(
            pages[node].events, att.attempt, node, handle.node_count, handle.node_noun
        )
    # The metric points go to the store too, for its other readers (`tcl metrics`, a team's
    # PostgreSQL); keyed by the cache's seq, so keeping them again changes nothing.
    ctl.metrics.add(run.id, fresh)
    ctl.phases.add(run.id, fresh)  # the attempts' time to first step, their last steps
    pid = job_pid(pages.get(0))
    if (pid is not None and pid != att.pid) or any(e.kind is EventKind.STATE for e in fresh):
        # not on every pull: a store write per printed line was most of a pull's time
        ctl.store.update_attempt(run.id, att.attempt, log_cursor=cache.last_seq(), pid=pid)
    requeued = next((p.next_attempt for p in pages.values() if p.next_attempt), None)
    if requeued is not None:
        _next_attempt(ctl, run, att, requeued, pages)
        return PullResult(fresh, RunState.QUEUED, True)
    lost = next((p for p in pages.values() if p.lost), None)
    if lost is not None:
        why = lost.message or "its host lost it"
        lost_end = (RunState.TERMINATED, None, why, AttemptCause.NODE_LOST)
        if await retry_after_end(ctl, run, att, *lost_end) is None:
            return PullResult(fresh, RunState.WAITING_RETRY, True)  # its policy places it again
        if not relaunch and not to_queue:
            return PullResult(fresh, run.state, False, waited=False)
        if to_queue:  # a sweep's run: placed again from its queue
            await _lost(ctl, run, att)
            current = ctl.store.get_run(run.id)
            if move(current.state, RunState.WAITING_RETRY) is not Move.APPLY:
                return PullResult(fresh, current.state, False)  # stopped here meanwhile
            ctl.retries.wait(run.id, 0.0, False, f"{why}; placing it again")
            ctl.store.set_state(run.id, RunState.WAITING_RETRY, message=f"{why}; placing it again")
            return PullResult(fresh, RunState.WAITING_RETRY, True)
        await _relaunch(ctl, run, att, lost.message or "its host lost it")
        return PullResult(fresh, ctl.store.get_run(run.id).state, True)
    states = [node_state(pages, cache, att, n) for n in range(handle.node_count)]
    failed = failed_node(pages, states) if not run.state.is_final else None
    if failed is not None:
        # Watchdog: one node's job failed while others still run. A multi-host job cannot go
        # on without it (the others would hang in their next collective): stop them now (a
        # hung node's peers dump their stacks first). The attempt ends once they did, as any
        # end does (its retry policy decides); their last events come with the next pulls,
        # which poll only the nodes still live, so nothing is stopped twice.
        await backend.stop(handle, grace_s=STOP_GRACE_S, dump_stacks=hung([pages[failed[0]]]))
        return PullResult(fresh, RunState.RUNNING, True)
    state = worst_state(states)
    if state.is_final and len(pages) < handle.node_count:
        # every node ended, some known only from the kept log: the next pull asks them all
        return PullResult(fresh, RunState.RUNNING, True)
    more = any(p.more for p in pages.values())
    if not more or not state.is_final:
        codes = [p.exit_code for p in pages.values() if p.exit_code]
        code = codes[0] if codes else next((p.exit_code for p in pages.values()), None)
        why = next((p.message for p in pages.values() if p.message), "")
        preempted = any(p.preempted for p in pages.values())
        cause = AttemptCause.of_end(state, preempted)
        finals = [cache.node_final(att.attempt, n) for n in range(handle.node_count)]
        if state is RunState.FAILED and any(f is not None and f.reason == "hung" for f in finals):
            cause = AttemptCause.HUNG
        failed_first = first_failed(finals) if state is RunState.FAILED else None
        if failed_first is not None and handle.node_count > 1:
            node, code = failed_first[0], failed_first[1].exit_code
            noun = handle.node_noun
            how = "was found hung" if failed_first[1].reason == "hung" else "failed"
            why = f"{noun} {node} {how}" + (f" (exit code {code})" if code is not None else "")
            if any(f is not None and f.state is RunnerState.TERMINATED for f in finals):
                why += f"; the other {noun}s were stopped"
        if state is RunState.FAILED and not why and code is not None:
            # what the researcher wants to read first: the job's own last word, not only a code
            said = cache.last_error_line(att.attempt)
            why = f"exit code {code}: {said}" if said else ""
        if state.is_final and not run.state.is_final:
            ended = await retry_after_end(ctl, run, att, state, code, why, cause)
            if ended is None:
                return PullResult(fresh, RunState.WAITING_RETRY, True)  # placed again when due
            why = ended
        if state != run.state or state is RunState.QUEUED:  # a page that moves nothing: no read
            record_state(ctl, ctl.store.get_run(run.id), att, state, code, why, cause)
    if state.is_final and not more and release:
        await release_attempt(ctl, att, state)
    return PullResult(fresh, state if not more else RunState.RUNNING, more)


async def _retry_when_due(ctl: Control, run: Run, wait_s: float, relaunch: bool) -> PullResult:
    """A run waiting for its retry: placed again once its backoff passed (when this caller
    places runs); a long-poll waits for that moment rather than answer at once."""
    waiting = ctl.retries.waiting(run.id)
    if waiting is not None and not waiting.due and wait_s > 0:
        await asyncio.sleep(min(wait_s, max(0.0, waiting.not_before - time.time())))
        waiting = ctl.retries.waiting(run.id)
    # no waiting row: a placement again that stopped half-way (its adoption ended its attempt)
    if relaunch and (waiting is None or waiting.due):
        await place_waiting(ctl, run.id)
    return PullResult([], ctl.store.get_run(run.id).state, True)


async def _lost(ctl: Control, run: Run, att: Attempt) -> None:
    """End the attempt its host lost and free what is left of it."""
    ctl.store.update_attempt(
        run.id, att.attempt, state=RunState.TERMINATED, cause=AttemptCause.NODE_LOST
    )
    with contextlib.suppress(TclError):
        await release_attempt(ctl, att, RunState.TERMINATED)


async def _relaunch(ctl: Control, run: Run, att: Attempt, why: str) -> None:
    """The host lost the run (a preempted node): end this attempt, free what is left of it,
    and place the run again as its next attempt; when that fails the run fails, saying why."""
    from tcl.control.lifecycle.submit import relaunch

    await _lost(ctl, run, att)
    current = ctl.store.get_run(run.id)
    if move(current.state, RunState.QUEUED) is not Move.APPLY:
        return  # stopped here meanwhile
    ctl.store.set_state(run.id, RunState.QUEUED, message=f"{why}; placing it again")
    before = ctl.store.latest_attempt(run.id)
    try:
        await relaunch(ctl, run.id)
    except (NoPlacementError, AgentError, SshConnectError) as e:
        end_failed_placement(ctl, run.id, before)
        # nothing could take it now (its node is still going away, a queued resource waits):
        # not the run's fault, it waits and is placed again when due (each pull looks)
        why = f"{why}; nothing took it yet ({str(e).splitlines()[0]}): trying again"
        ctl.retries.wait(run.id, NO_PLACE_RETRY_S, False, why)
        ctl.store.set_state(run.id, RunState.WAITING_RETRY, message=why)
    except TclError as e:
        why = f"{why}; placing it again failed: {str(e).splitlines()[0]}"
        ctl.store.set_state(run.id, RunState.FAILED, message=why)


def _next_attempt(
    ctl: Control, run: Run, att: Attempt, handle: Handle, pages: dict[int, NodePage]
) -> None:
    """The scheduler put the run back in its queue (preemption, requeue): a new attempt with
    the backend's new handle; the old one ends ``terminated``."""
    ctl.store.update_attempt(
        run.id, att.attempt, state=RunState.TERMINATED, cause=AttemptCause.PREEMPTED
    )
    new = ctl.store.add_attempt(run.id, att.host, att.backend, handle.model_dump(mode="json"))
    ctl.store.update_attempt(run.id, new.attempt, state=RunState.QUEUED)
    why = next((p.message for p in pages.values() if p.message), "requeued")
    current = ctl.store.get_run(run.id)
    if move(current.state, RunState.QUEUED) is Move.APPLY:
        ctl.store.set_state(run.id, RunState.QUEUED, message=why)


def record_state(
    ctl: Control,
    run: Run,
    att: Attempt,
    state: RunState,
    exit_code: int | None,
    why: str,
    cause: AttemptCause,
) -> None:
    """Write what the host says when it moves the run on; a late or stale page (a node still
    provisioning, a run stopped here already) changes nothing."""
    if state == run.state and not (state is RunState.QUEUED and why and why != run.message):
        return
    if waiting_for_retry(ctl, run):
        return  # its last attempt's end was handled: the run waits to be placed again
    if move(run.state, state) is not Move.APPLY:
        return
    if state.is_final:
        msg: str | None = why or (f"exit code {exit_code}" if exit_code is not None else None)
    else:
        msg = why or None
    # the run and its attempt in one write: a reader sees both ended, or neither
    ended = cause if state.is_final else None
    ctl.store.set_state(
        run.id, state, exit_code=exit_code, message=msg, attempt=att.attempt, cause=ended
    )


def lost_contact(host: str | None, budget_s: float, error: str) -> str:
    """Why a run whose host did not answer for its whole budget ended, in a user's words: tcl
    lost it, the job did not fail (its outcome is unknown)."""
    span = f"{budget_s / 60:.0f} min" if budget_s >= 120 else f"{budget_s:.0f} s"
    first = error.splitlines()[0] if error else "no answer"
    return (
        f"tcl lost contact with host {host or '?'} for {span} and gave up on it; how the job "
        f"went is unknown, not a failure of the job (last error: {first})"
    )


def gave_up(ctl: Control, run_id: str, why: str) -> None:
    """End a run whose host did not answer for its whole budget: ``terminated`` for cause
    ``infra`` (how its job went is unknown, not its verdict; what its host may still hold is
    the orphan sweep's)."""
    run = ctl.store.get_run(run_id)
    att = ctl.store.latest_attempt(run_id)
    if att is not None and not run.state.is_final:
        record_state(ctl, run, att, RunState.TERMINATED, None, why, AttemptCause.INFRA)


class ResumingPull:
    """Long-poll pulls of one run that survive dropped connections: the host's connection is
    reset and the pull tried again after a jittered backoff, until ``deadline_s`` of failures
    in a row (then the error is raised)."""

    def __init__(
        self,
        deadline_s: float,
        on_reconnect: Callable[[str], None] | None = None,
        relaunch: bool = True,
        to_queue: bool = False,
    ) -> None:
        self.deadline_s = deadline_s
        self.on_reconnect = on_reconnect
        self.relaunch = relaunch
        self.to_queue = to_queue
        self._failing_since: float | None = None
        self._attempt = 0

    async def pull(self, ctl: Control, run: Run) -> PullResult | None:
        """The next page, or None after a dropped connection (the caller loops)."""
        try:
            res = await pull(
                ctl, run, wait_s=10.0, release=False, relaunch=self.relaunch, to_queue=self.to_queue
            )
        except RETRYABLE as e:
            now = time.monotonic()
            self._failing_since = self._failing_since or now
            if now - self._failing_since > self.deadline_s:
                raise
            if self.on_reconnect is not None:
                self.on_reconnect(str(e).splitlines()[0])
            att = ctl.store.latest_attempt(run.id)
            if att is not None and att.handle:
                await ctl.backend_for(att).reset(ctl.handle(att))
            await asyncio.sleep(backoff_s(self._attempt, base_s=0.2, cap_s=3.0))
            self._attempt += 1
            return None
        self._failing_since, self._attempt = None, 0
        return res


def drained(ctl: Control, cache: LogCache, run_id: str) -> bool:
    """Every node of the latest attempt has its final state kept (an attempt none of whose
    events were pulled, e.g. stopped or failed before its job started, counts as drained)."""
    att = ctl.store.latest_attempt(run_id)
    if att is None:
        return True
    nodes = ctl.handle(att).node_count if att.handle else 1
    if not cache.attempt_kept(att.attempt):
        return True
    return all(cache.node_final(att.attempt, n) is not None for n in range(nodes))
