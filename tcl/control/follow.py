"""Pulling events from a run's runner into the local log cache; follow, refresh, stop.

The local cache is the cursor: a pull asks for ``after = last seq kept`` and appends only newer
events, so a follow that loses its SSH connection reconnects (jittered backoff) and continues
with no lost and no repeated line.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tcl.control.agents import RunnerApi
from tcl.control.backoff import backoff_s
from tcl.control.errors import (
    AgentError,
    AgentUnreachableError,
    SshConnectError,
    TclError,
    UnknownHostError,
)
from tcl.control.logcache import LogCache
from tcl.control.service import Control
from tcl.control.states import RunState
from tcl.runner.api import Event, EventKind, RunnerState
from tcl.shim.api import TaskInfo, TaskStatus, TerminationReason

if TYPE_CHECKING:
    from tcl.control.store import Attempt, Run

RECONNECT_DEADLINE_S = 300.0
_RETRYABLE = (AgentUnreachableError, SshConnectError)

_STATE_MAP = {
    RunnerState.WAITING_SPEC: RunState.PROVISIONING,
    RunnerState.WAITING_CODE: RunState.PROVISIONING,
    RunnerState.READY: RunState.PROVISIONING,
    RunnerState.RUNNING: RunState.RUNNING,
    RunnerState.SUCCEEDED: RunState.SUCCEEDED,
    RunnerState.FAILED: RunState.FAILED,
    RunnerState.TERMINATED: RunState.TERMINATED,
}


@dataclass(frozen=True)
class PullResult:
    events: list[Event]  # new events, in order, already stored locally
    state: RunState
    more: bool


class RunnerGone(AgentError):
    """The task ended and the host removed its runner (its retention ran out): ``task`` holds
    the outcome the shim kept."""

    def __init__(self, message: str, task: TaskInfo) -> None:
        super().__init__(message)
        self.task = task


async def _runner(ctl: Control, att: Attempt) -> RunnerApi:
    """A client for the attempt's runner. Its port and bearer token come from the host's shim
    (the token is never stored on this side)."""
    task_id = att.handle.get("task_id")
    if not isinstance(task_id, str):
        raise TclError(f"run {att.run_id} has no task (attempt {att.attempt})")
    backend = ctl.backend_for(att)
    task = await _task(ctl, att)
    if task.ports.runner is None or not task.runner_token:
        if task.status is TaskStatus.TERMINATED:
            raise RunnerGone(f"run {att.run_id}: the host removed its runner", task)
        raise AgentError(f"run {att.run_id}: task {task_id} has no runner now ({task.status})")
    return await backend.runner(task.ports.runner, task.runner_token, att.run_id)


async def _task(ctl: Control, att: Attempt) -> TaskInfo:
    return await (await ctl.backend_for(att).shim()).get_task(str(att.handle["task_id"]))


_OUTCOME = {
    TerminationReason.DONE: RunState.SUCCEEDED,
    TerminationReason.STOPPED_BY_USER: RunState.TERMINATED,
}


def _record_outcome(ctl: Control, run: Run, att: Attempt, task: TaskInfo) -> RunState:
    """The run's end as the shim kept it, for a runner (and the logs it had) already gone."""
    state = _OUTCOME.get(task.termination_reason or TerminationReason.FAILED, RunState.FAILED)
    if state != run.state:
        ctl.store.set_state(
            run.id, state, exit_code=task.exit_code,
            message=f"{task.message}; logs not fetched before the host's retention are gone",
        )  # fmt: skip
    ctl.store.update_attempt(run.id, att.attempt, handle={**att.handle, "released": True})
    return state


async def pull(ctl: Control, run: Run, wait_s: float = 0.0, release: bool = True) -> PullResult:
    """One page of new events from the runner, stored before being returned. ``release``:
    once the last event is kept, end the task here (else the caller does, :func:`release`)."""
    att = ctl.store.latest_attempt(run.id)
    if att is None or (att.handle.get("released") and run.state.is_final):
        return PullResult([], run.state, False)  # every event is kept locally already
    cache = LogCache(run.id)
    try:
        runner = await _runner(ctl, att)
    except RunnerGone as gone:
        return PullResult([], _record_outcome(ctl, run, att, gone.task), False)
    try:
        page = await runner.events(after=cache.last_seq(), wait_s=wait_s)
    except AgentUnreachableError:
        # A runner that does not answer while the shim says its task ended (its process
        # died, the task vanished): the shim's outcome is the run's.
        task = await _task(ctl, att)
        if task.status is not TaskStatus.TERMINATED:
            raise
        return PullResult([], _record_outcome(ctl, run, att, task), False)
    finally:
        await runner.aclose()
    fresh = cache.append(page.events)
    ctl.store.update_attempt(run.id, att.attempt, log_cursor=cache.last_seq())
    state = _STATE_MAP[page.state]
    if not page.more or not state.is_final:
        _record_state(ctl, run, state, page.exit_code)
    if state.is_final and not page.more and release:
        await _release(ctl, att, state)
    return PullResult(fresh, state if not page.more else RunState.RUNNING, page.more)


def _record_state(ctl: Control, run: Run, state: RunState, exit_code: int | None) -> None:
    if state is RunState.PROVISIONING or state == run.state:
        return
    msg = f"exit code {exit_code}" if exit_code is not None else None
    ctl.store.set_state(run.id, state, exit_code=exit_code, message=msg)


_REASON = {
    RunState.SUCCEEDED: TerminationReason.DONE,
    RunState.FAILED: TerminationReason.FAILED,
    RunState.TERMINATED: TerminationReason.STOPPED_BY_USER,
}


async def _release(ctl: Control, att: Attempt, state: RunState) -> None:
    """Once every event is kept locally: end the task (the shim has usually freed its
    accelerators already, when the job ended) and remove its lingering runner and files."""
    if att.handle.get("released"):
        return
    try:
        shim = await ctl.backend_for(att).shim()
        reason = _REASON.get(state, TerminationReason.DONE)
        task_id = str(att.handle["task_id"])
        await shim.terminate_task(task_id, reason, f"run {state.value}")
        await shim.remove_task(task_id)
    except TclError:
        return  # the host is gone or the task already is: nothing to free
    ctl.store.update_attempt(att.run_id, att.attempt, handle={**att.handle, "released": True})


async def release(ctl: Control, run_id: str) -> None:
    """End a final run's task and remove its runner once every event is kept (what a pull
    with ``release`` does): the host frees its accelerators and files."""
    run = ctl.store.get_run(run_id)
    att = ctl.store.latest_attempt(run_id)
    if att is not None and run.state.is_final:
        await _release(ctl, att, run.state)


async def follow(
    ctl: Control,
    run: Run,
    on_event: Callable[[Event], None],
    on_reconnect: Callable[[str], None] | None = None,
    after: int = 0,
) -> Run:
    """Print kept events after ``after``, then new ones until the run ends; survives drops.

    Events are handed over as soon as they are pulled; the run is returned once its task is
    released on its host, so when a followed ``tcl submit`` returns its accelerators are free."""
    cache = LogCache(run.id)
    for e in cache.read(after):
        on_event(e)
    failing_since: float | None = None
    attempt = 0
    while True:
        current = ctl.store.get_run(run.id)
        if current.state.is_final and _has_final_event(cache):
            return current
        try:
            res = await pull(ctl, current, wait_s=10.0, release=False)
        except _RETRYABLE as e:
            now = time.monotonic()
            failing_since = failing_since or now
            if now - failing_since > RECONNECT_DEADLINE_S:
                raise
            if on_reconnect is not None:
                on_reconnect(str(e).splitlines()[0])
            att = ctl.store.latest_attempt(run.id)
            if att is not None:
                await ctl.backend_for(att).reset()
            await asyncio.sleep(backoff_s(attempt, base_s=0.2, cap_s=3.0))
            attempt += 1
            continue
        failing_since, attempt = None, 0
        for ev in res.events:
            on_event(ev)
        if res.state.is_final and not res.more:
            await release(ctl, run.id)
            return ctl.store.get_run(run.id)


def _has_final_event(cache: LogCache) -> bool:
    # a run whose events were never pulled (e.g. stopped before it started) counts as drained
    last = None
    for e in cache.read():
        if e.kind is EventKind.STATE:
            last = e
    return last is None or (last.state is not None and last.state.is_final)


async def refresh(ctl: Control, run: Run, timeout_s: float = 5.0) -> Run:
    """Bring a non-final run's state up to date (one quick pull); unchanged if unreachable."""
    if run.state.is_final or run.host is None:
        return run
    try:
        await asyncio.wait_for(pull(ctl, run), timeout_s)
    except (*_RETRYABLE, TimeoutError):
        ctl.store.note_unreachable(run.id)  # `tcl ps` shows it `unknown` since the first
        return run
    except TclError:
        return run
    ctl.store.clear_unreachable(run.id)
    return ctl.store.get_run(run.id)


async def stop(ctl: Control, run: Run, grace_s: float = 10.0) -> Run:
    """Stop the job (SIGTERM, SIGKILL after ``grace_s``), keep its last logs, free the task."""
    if run.state.is_final:
        return run
    att = ctl.store.latest_attempt(run.id)
    if att is None:
        ctl.store.set_state(run.id, RunState.TERMINATED, message="stopped before placement")
        return ctl.store.get_run(run.id)
    try:
        ctl.backend_for(att)
    except UnknownHostError as e:  # a run from before placement records: end it here only
        ctl.store.set_state(
            run.id, RunState.TERMINATED, message=f"stopped here only, its task not reached: {e}"
        )
        return ctl.store.get_run(run.id)
    try:
        runner = await _runner(ctl, att)
        try:
            await runner.stop(grace_s)
        finally:
            await runner.aclose()
        deadline = time.monotonic() + grace_s + 10.0
        while time.monotonic() < deadline:
            res = await pull(ctl, ctl.store.get_run(run.id), wait_s=1.0)
            if res.state.is_final and not res.more:
                break
    except AgentError:
        pass  # the runner is gone already: terminate the task below
    ctl.store.set_state(run.id, RunState.TERMINATED, message="stopped by user")
    try:
        shim = await ctl.backend_for(att).shim()
        await shim.terminate_task(
            str(att.handle["task_id"]), TerminationReason.STOPPED_BY_USER, "stopped by user"
        )
    except TclError:
        pass
    return ctl.store.get_run(run.id)
