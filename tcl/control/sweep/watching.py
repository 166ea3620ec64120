"""Waiting for one placed entry's run to end, as its owner (the daemon's run controller,
:mod:`tcl.control.lifecycle.reconcile`) records it: done, failed, or waiting for a retry (the
entry goes back to the queue). The watcher only reads the store: it is woken by its own
daemon's controller when the run moves, and looks again every ``poll_s`` whoever owns the run
(another daemon's controller on the same PostgreSQL), through state store outages. A run whose
entry was cancelled is stopped, and what it holds freed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Protocol

from tcl.control.errors import StoreError, TclError
from tcl.control.lifecycle.release import release
from tcl.control.lifecycle.retry import waiting_for_retry
from tcl.control.lifecycle.stop import stop
from tcl.control.service import Control
from tcl.control.states import RunState
from tcl.control.sweep.admission import Admission
from tcl.control.sweep.model import Entry, EntryState, error_line
from tcl.control.sweep.placing import TRACE
from tcl.control.sweep.queue import SweepQueue
from tcl.control.sweep.storeretry import StoreRetry

log = logging.getLogger("tcl.scheduler")
POLL_S = 1.0  # how often the store is read when no controller here tells of a change
# an ended run's owner here frees what it held on its host (the shim's accelerators) before the
# next entry is claimed for them; the wait for that is bounded (a host gone cannot be freed)
RELEASE_WAIT_S = 5.0


class RunOwner(Protocol):
    """What the watcher needs of the daemon's run controller."""

    async def adopt(self, run_id: str) -> bool: ...

    def owns(self, run_id: str) -> bool: ...

    def changed(self, run_id: str) -> asyncio.Event: ...


class EntryWatcher:
    """Its scheduler's collaborators: ``admission`` is told of each run that ended, ``wake``
    set when one did (its GPU is free: the scheduler claims the next entry now); ``owner``:
    the daemon's run controller, which owns the runs (None: another process's does)."""

    def __init__(
        self,
        queue: SweepQueue,
        scheduler: str,
        store_retry: StoreRetry,
        admission: Admission,
        wake: asyncio.Event,
        owner: RunOwner | None = None,
        poll_s: float = POLL_S,
    ) -> None:
        self.queue = queue
        self.scheduler = scheduler
        self.store_retry = store_retry
        self.admission = admission
        self.wake = wake
        self.owner = owner
        self.poll_s = poll_s

    async def outcome(self, ctl: Control, entry: Entry) -> tuple[EntryState, str]:
        """How the entry's run ended (its entry's end and why). Cancelled (its lease is gone):
        a run whose entry the user cancelled is stopped, and what it holds freed."""
        assert entry.run_id is not None
        try:
            return await self._wait_through_outages(ctl, entry.run_id)
        except asyncio.CancelledError:
            # our lease is gone: cancelled by the user (stop its run), or taken by another
            # scheduler (leave the run to it)
            with contextlib.suppress(TclError):
                now = await asyncio.to_thread(self.queue.entry, entry.id)
                if now.state is EntryState.CANCELLED:
                    stopped = await stop(ctl, ctl.store.get_run(entry.run_id), grace_s=5.0)
                    await release(ctl, stopped.id)
            raise
        except Exception as e:  # a bug: end the entry
            log.exception("watching entry %s", entry.job_id)
            return EntryState.FAILED, error_line(e)

    def record_end(self, ctl: Control, entry: Entry, state: EntryState, why: str) -> None:
        assert entry.run_id is not None
        if state is EntryState.QUEUED:
            waiting = ctl.retries.waiting(entry.run_id)
            not_before = waiting.not_before if waiting is not None else 0.0
            self.queue.release(self.scheduler, entry.id, not_before, why)
        else:
            self.queue.finish(self.scheduler, entry.id, state, why)

    async def _wait_through_outages(self, ctl: Control, run_id: str) -> tuple[EntryState, str]:
        """:meth:`_wait`, again while the state store does not answer (the run goes on on its
        host meanwhile, its owner carries on once the store answers)."""
        failures = 0
        while True:
            try:
                return await self._wait(ctl, run_id)
            except StoreError as e:
                log.warning("watching run %s: %s; reading it again", run_id, e)
                self.store_retry.error(e)
                failures += 1
                await asyncio.sleep(self.store_retry.wait_s(failures))

    async def _wait(self, ctl: Control, run_id: str) -> tuple[EntryState, str]:
        """Until the run ends (done/failed) or waits for a retry (queued)."""
        if self.owner is not None:
            await self.owner.adopt(run_id)  # its controller takes it now, not at its next pass
        while True:
            # before the read: a change after it wakes the wait below
            changed = self.owner.changed(run_id) if self.owner is not None else asyncio.Event()
            run = await asyncio.to_thread(ctl.store.get_run, run_id)
            if run.state.is_final:
                # the next entry is claimed once its owner here released what the run held
                # (a claim before would find its accelerators taken: refused, and the
                # scheduler would wait for a probe as if the cluster were full)
                await self._released(run_id)
                self.admission.run_ended()
                self.wake.set()
                if TRACE:
                    log.info("run %s ended %.3f", run_id, time.time())
                if run.state is RunState.SUCCEEDED:
                    return EntryState.DONE, ""
                return EntryState.FAILED, run.message or run.state.value
            if waiting_for_retry(ctl, run):
                self.admission.run_ended()  # its attempt ended: what it held is free
                return EntryState.QUEUED, run.message
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), self.poll_s)

    async def _released(self, run_id: str) -> None:
        """Until the run's owner here let it go (it released the run's task: its owner task
        ended), at most :data:`RELEASE_WAIT_S`; at once when another process owns it."""
        owner = self.owner
        deadline = time.monotonic() + RELEASE_WAIT_S
        while owner is not None and owner.owns(run_id):
            left = deadline - time.monotonic()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):  # set when its owner task ends
                await asyncio.wait_for(owner.changed(run_id).wait(), left)
