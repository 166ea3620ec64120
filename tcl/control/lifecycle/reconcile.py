"""The run controller: one owner for every placed run that has not ended.

Each pass (every ``pass_s``, or at once when woken) it lists the live runs in the store, takes
the lease (:mod:`tcl.control.runleases`) of each one it may own and starts an owner task for it;
the leases it holds are renewed, and a run whose lease another controller took is let go. The
owner task is the one process that advances its run, whether or not anyone watches:

- it pulls every event into the local log cache (so a ``-d`` run nobody follows keeps all its
  lines after its host's retention), and tells the run's followers (:func:`changed`);
- a pull moves the run on (:mod:`tcl.control.lifecycle.pull`): its end, a retry placed once its
  backoff passed, a requeue, a lost node placed again;
- once the run has ended and every event is kept it frees the run's host resources and gives
  the lease up.

Unreachable is never failed: a host that does not answer is asked again, with a jittered
backoff, for as long as it takes (``tcl ps`` shows it unreachable meanwhile); only the job's
exit, a preemption or the backend's verdict end a run. A controller that dies stops renewing;
its leases expire and the next controller (the restarted daemon, another one on the same
PostgreSQL, a ``TCL_SERVE=0`` command) carries on from the store and the log cache.

Runs it does not own: those still being placed by their submit or their sweep's scheduler
(pending), and a sweep's run that waits for a retry (its entry is back in the queue: the
scheduler places it again, :mod:`tcl.control.sweep.scheduler`). A sweep's placed run is owned
here like any other; its entry's watcher reads how it goes from the store. A sweep's run whose
host does not answer for ``sweep_unreachable_s`` ends ``terminated`` for cause ``infra`` (its
entry fails saying so, the task its host may hold is the orphan sweep's); any other run is asked
again for as long as it takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable

from tcl.control.backoff import backoff_s, pause
from tcl.control.errors import StoreError, TclError
from tcl.control.lifecycle.adopt import adopt_placement, interrupted
from tcl.control.lifecycle.ownership import (
    SWEEP_QUEUED,
    WAITING_STATES,
    ControllerSettings,
    controller_id,
    ownable,
    sweep_run,
    undrained,
)
from tcl.control.lifecycle.pull import RETRYABLE, ResumingPull, gave_up, lost_contact
from tcl.control.lifecycle.release import release
from tcl.control.retries import policy_of
from tcl.control.runleases import RunLeases
from tcl.control.service import Control
from tcl.control.states import RunState
from tcl.control.store import Run, Store

log = logging.getLogger("tcl.controller")

ERROR_RETRY_CAP_S = 30.0  # an owner whose pulls fail (not a dropped connection): ask this often
# A run that ended (stopped here) with events still on its host: drained for this long at most
# when its host does not answer (then what was kept is all a follower gets).
DRAIN_DEADLINE_S = 300.0


class RunController:
    """``control_for(run)``: the Control its run is advanced with. ``only``: own just these
    runs (a ``TCL_SERVE=0`` command follows one run in-process)."""

    def __init__(
        self,
        store: Store,
        control_for: Callable[[Run], Control],
        settings: ControllerSettings | None = None,
        owner: str | None = None,
        only: set[str] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.store = store
        self.leases = RunLeases(store)
        self.control_for = control_for
        self.settings = settings or ControllerSettings()
        self.owner = owner or controller_id()
        self.only = only
        self.on_error = on_error
        self.owners: dict[str, asyncio.Task[None]] = {}  # run id -> its owner task
        self._changed: dict[str, asyncio.Event] = {}
        self._wake = asyncio.Event()
        self.trouble: dict[str, str] = {}  # run id -> why its host does not answer now

    # what followers use -----------------------------------------------------------------------

    def owns(self, run_id: str) -> bool:
        return run_id in self.owners

    def changed(self, run_id: str) -> asyncio.Event:
        """Set once the run's owner kept new events or saw its state move (take it before
        reading the cache: a change after the read sets it)."""
        ev = self._changed.get(run_id)
        if ev is None:
            ev = self._changed[run_id] = asyncio.Event()
        return ev

    def _notify(self, run_id: str) -> None:
        ev = self._changed.pop(run_id, None)
        if ev is not None:
            ev.set()

    async def adopt(self, run_id: str) -> bool:
        """Own this run now when it needs an owner (live, or ended with events left on its
        host) and nobody else owns it; True when this controller owns it."""
        if self.owns(run_id):
            return True
        run = await asyncio.to_thread(self.store.get_run, run_id)
        if ownable(run, self.settings.lease_s) or undrained(self.control_for(run), run):
            return await self._take(run)
        return False

    def owned_elsewhere(self, run_id: str) -> bool:
        """Another controller holds a live lease on the run."""
        lease = self.leases.of([run_id]).get(run_id)
        return lease is not None and lease.owner != self.owner and lease.live(time.time())

    def wake(self) -> None:
        self._wake.set()

    def busy(self) -> bool:
        return bool(self.owners)

    # the loop ---------------------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        beats = asyncio.create_task(self._heartbeats(stopping))
        failures = 0
        try:
            while not stopping.is_set():
                self._wake.clear()
                try:
                    await self._pass()
                    failures = 0
                except StoreError as e:
                    failures += 1
                    log.warning("run controller: %s; asking again", e)
                    self._error(e)
                wait_s = self.settings.pass_s
                if failures:
                    wait_s = max(wait_s, backoff_s(failures - 1, 0.5, 10.0))
                await pause(self._wake, stopping, wait_s)
        finally:
            beats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beats
            await self._hand_back()

    async def _pass(self) -> None:
        runs = await asyncio.to_thread(self._live_runs)
        free = [r for r in runs if r.id not in self.owners and ownable(r, self.settings.lease_s)]
        if not free:
            return
        free = await asyncio.to_thread(lambda: [r for r in free if not self._scheduler_s(r)])
        # one read of their leases: a run another live controller owns costs no write
        leases = await asyncio.to_thread(self.leases.of, [r.id for r in free])
        now = time.time()
        for run in free:
            lease = leases.get(run.id)
            if lease is None or not lease.live(now) or lease.owner == self.owner:
                await self._take(run)

    def _scheduler_s(self, run: Run) -> bool:
        """A sweep's run whose placement its scheduler left unfinished: it adopts it."""
        return sweep_run(run) and interrupted(self.store, run) is not None

    def _live_runs(self) -> list[Run]:
        if self.only is not None:
            found = self.store.runs_by_id(self.only)
            return [r for r in found.values() if not r.state.is_final]
        return self.store.list_runs(include_final=False, limit=1_000_000)

    async def _take(self, run: Run) -> bool:
        taken = await asyncio.to_thread(self.leases.take, self.owner, run.id, self.settings.lease_s)
        if taken and run.id not in self.owners:
            task = asyncio.create_task(self._own(run.id))
            self.owners[run.id] = task
            task.add_done_callback(functools.partial(self._ended, run.id))
        return taken

    def _ended(self, run_id: str, task: asyncio.Task[None]) -> None:
        if self.owners.get(run_id) is task:
            del self.owners[run_id]
        self._notify(run_id)

    async def _heartbeats(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.settings.heartbeat_s)
            held_ids = set(self.owners)
            try:
                held = await asyncio.to_thread(
                    self.leases.renew, self.owner, held_ids, self.settings.lease_s
                )
            except StoreError as e:
                log.warning("renewing run leases: %s", e)
                self._error(e)
                continue
            for run_id in held_ids - held:  # another controller took it (ours expired)
                task = self.owners.get(run_id)
                if task is not None:
                    log.warning("run %s: its lease went to another controller", run_id)
                    task.cancel()

    async def _hand_back(self) -> None:
        """Stopping: cancel the owner tasks and give their leases up at once (the next
        controller need not wait for them to expire)."""
        held = dict(self.owners)
        for task in held.values():
            task.cancel()
        if held:
            await asyncio.wait(held.values(), timeout=10.0)
        for run_id in held:
            with contextlib.suppress(StoreError):
                await asyncio.to_thread(self.leases.drop, self.owner, run_id)

    def _error(self, e: BaseException) -> None:
        if self.on_error is not None:
            self.on_error(e)

    # one run ----------------------------------------------------------------------------------

    async def _own(self, run_id: str) -> None:
        """Advance the run until it ended, every event is kept and its host is freed."""
        failures = 0
        while True:
            try:
                await self._advance(run_id)
                break
            except asyncio.CancelledError:
                raise
            except (TclError, StoreError) as e:
                # not a verdict on the job: whatever failed (a host's answer, the store) is
                # asked again; the run keeps its state meanwhile
                failures += 1
                log.warning("run %s: %s; trying again", run_id, str(e).splitlines()[0])
                self._error(e)
                await asyncio.sleep(backoff_s(failures - 1, 1.0, ERROR_RETRY_CAP_S))
            except Exception as e:  # a bug: logged, retried later, never the job's failure
                failures += 1
                log.exception("run %s", run_id)
                self._error(e)
                await asyncio.sleep(backoff_s(failures - 1, 1.0, ERROR_RETRY_CAP_S))
        with contextlib.suppress(StoreError):
            await asyncio.to_thread(self.leases.drop, self.owner, run_id)

    async def _place_again(self, ctl: Control, run: Run) -> None:
        """Nothing of an interrupted placement runs: a first one (its ``tcl submit`` died) ends
        the run, saying so; a placement again (a retry, a lost node) is made again here."""
        if run.state is RunState.PENDING:
            ctl.store.set_state(
                run.id,
                RunState.FAILED,
                message="its tcl submit stopped before the job started; nothing is left running",
            )
            return
        why = "its placement was interrupted (its controller stopped); placing it again"
        if run.state is RunState.PROVISIONING:  # it said placed before its attempt named any
            ctl.store.set_state(run.id, RunState.QUEUED, message=why)
        if policy_of(run) is not None:
            ctl.retries.wait(run.id, 0.0, False, why)  # placed by the pulls below, when due
            ctl.store.set_state(run.id, RunState.WAITING_RETRY, message=why)
            return
        from tcl.control.lifecycle.submit import relaunch

        try:
            await relaunch(ctl, run.id)
        except TclError as e:
            why = f"{why}; placing it again failed: {str(e).splitlines()[0]}"
            ctl.store.set_state(run.id, RunState.FAILED, message=why)

    async def _advance(self, run_id: str) -> None:
        run = await asyncio.to_thread(self.store.get_run, run_id)
        ctl = self.control_for(run)
        unreachable = False

        def on_reconnect(why: str) -> None:
            nonlocal unreachable
            if not unreachable:
                unreachable = True
                with contextlib.suppress(StoreError):
                    ctl.store.note_unreachable(run_id)
            self.trouble[run_id] = why
            self._notify(run_id)

        sweep = sweep_run(run)
        att = interrupted(ctl.store, run)
        if sweep and (run.state in SWEEP_QUEUED or att is not None):
            return  # its scheduler places it (again), adopting what its placer left
        # its placer died mid-placement (the host unreachable: raised, tried again later)
        cut_short = att is not None or run.state is RunState.PENDING
        if cut_short and not await adopt_placement(ctl, run, att):
            await self._place_again(ctl, run)
        # unreachable for however long: asked again (a backoff capped at seconds), never failed
        # (a sweep's run: for its budget); an ended run's last events are waited for a while
        deadline_s = math.inf
        if run.state.is_final:
            deadline_s = DRAIN_DEADLINE_S
        elif sweep:
            deadline_s = self.settings.sweep_unreachable_s
        # a sweep's retry is placed by its scheduler (the entry goes back to the queue)
        puller = ResumingPull(deadline_s, on_reconnect, relaunch=not sweep, to_queue=sweep)
        while True:
            # off the event loop: a run's followers hand its lines on meanwhile
            current = await asyncio.to_thread(ctl.store.get_run, run_id)
            if current.state.is_final and not undrained(ctl, current):
                await release(ctl, run_id)
                return
            if sweep and current.state in SWEEP_QUEUED:
                return  # waits for a retry: its entry is back in the queue
            try:
                res = await puller.pull(ctl, current)
            except RETRYABLE as e:
                if current.state.is_final:
                    return  # its host is gone: what was kept is all there is
                if not sweep:
                    raise
                why = lost_contact(current.host, deadline_s, str(e))
                log.warning("run %s: %s", run_id, why)
                await asyncio.to_thread(gave_up, ctl, run_id, why)
                self._notify(run_id)
                continue
            except TclError:
                if current.state.is_final:
                    return  # its host is gone: what was kept is all there is
                raise
            if res is None:
                continue  # reconnected after a drop
            if unreachable:
                unreachable = False
                self.trouble.pop(run_id, None)
                ctl.store.clear_unreachable(run_id)
            if res.events or res.state is not current.state:
                self._notify(run_id)
                # its followers go first: they hand the new lines on while this loop's next
                # store reads would make them wait (a few ms a line)
                await asyncio.sleep(0)
            if res.state.is_final and not res.more:
                await release(ctl, run_id)
                return
            if not res.events and (res.state in WAITING_STATES or not res.waited):
                # a queued run's backend may answer without waiting, and so may a pull with
                # nothing to ask (an attempt that named nothing yet): pace it
                await asyncio.sleep(0.5)
