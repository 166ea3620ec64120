"""Stopping a run: its job on every node, its last logs kept, what it holds freed."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING

from tcl.control.errors import TclError
from tcl.control.lifecycle.pull import pull
from tcl.control.lifecycle.release import release_attempt
from tcl.control.lifecycle.retry import waiting_for_retry
from tcl.control.service import Control
from tcl.control.states import AttemptCause, RunState

if TYPE_CHECKING:
    from tcl.control.store import Attempt, Run


def only_active_run_id(ctl: Control) -> str:
    """What ``stop`` stops without a RUN: the one run not yet ended (never a guess among
    several)."""
    active = ctl.store.list_runs(include_final=False, limit=6)
    if not active:
        raise TclError("no run is active: nothing to stop")
    if len(active) > 1:
        names = ", ".join(r.id for r in active[:5]) + (", …" if len(active) > 5 else "")
        raise TclError(f"several runs are active ({names}): name the one to stop")
    return active[0].id


async def stop(ctl: Control, run: Run, grace_s: float = 10.0) -> Run:
    """Stop the job on every node (SIGTERM, SIGKILL after ``grace_s``), keep its last logs,
    free what it holds."""
    if run.state.is_final:
        return run
    if waiting_for_retry(ctl, run):  # its last attempt ended already: nothing runs to stop
        ctl.retries.placed(run.id)
        ctl.store.set_state(
            run.id, RunState.TERMINATED, message="stopped by user (was waiting to be placed again)"
        )
        return ctl.store.get_run(run.id)
    att = ctl.store.latest_attempt(run.id)
    if att is None or not att.handle:
        ctl.store.set_state(run.id, RunState.TERMINATED, message="stopped before placement")
        if att is not None:
            _stopped(ctl, att)
        return ctl.store.get_run(run.id)
    try:
        backend = ctl.backend_for(att)
        handle = ctl.handle(att)
        await backend.stop(handle, grace_s)
    except TclError as e:  # its host cannot be reached or is unknown: end it here only
        ctl.store.set_state(
            run.id, RunState.TERMINATED, message=f"stopped here only, its host not reached: {e}"
        )
        _stopped(ctl, att)
        return ctl.store.get_run(run.id)
    deadline = time.monotonic() + grace_s + 10.0
    if _owned(ctl, run.id):
        # its controller keeps the last events and frees its host (one writer of its log):
        # wait for that, so that the accelerators are free when the stop returns
        ctl.store.set_state(run.id, RunState.TERMINATED, message="stopped by user")
        _stopped(ctl, att)
        while time.monotonic() < deadline and _owned(ctl, run.id):
            await asyncio.sleep(0.2)
        return ctl.store.get_run(run.id)
    with contextlib.suppress(TclError):
        while time.monotonic() < deadline:
            res = await pull(
                ctl, ctl.store.get_run(run.id), wait_s=1.0, release=False, relaunch=False
            )
            if res.state.is_final and not res.more:
                break
    ctl.store.set_state(run.id, RunState.TERMINATED, message="stopped by user")
    _stopped(ctl, att)
    with contextlib.suppress(TclError):
        await release_attempt(ctl, ctl.store.latest_attempt(run.id) or att, RunState.TERMINATED)
    return ctl.store.get_run(run.id)


def _stopped(ctl: Control, att: Attempt) -> None:
    """The attempt ends with its run (kept as it was if it ended first: its job's exit)."""
    ctl.store.update_attempt(
        att.run_id, att.attempt, state=RunState.TERMINATED, cause=AttemptCause.STOPPED
    )


def _owned(ctl: Control, run_id: str) -> bool:
    """A controller holds the run's live lease (the daemon's, another command's)."""
    from tcl.control.runleases import RunLeases

    lease = RunLeases(ctl.store).of([run_id]).get(run_id)
    return lease is not None and lease.live()
