"""Following one placed entry's run to its end: its events pulled until it ends (done,
failed) or waits for a retry (back in the queue), through state store outages; its host's
resources freed; a run whose entry was cancelled stopped; the entry's end recorded."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from tcl.control.errors import StoreError, TclError
from tcl.control.lifecycle.pull import RETRYABLE, ResumingPull, record_state
from tcl.control.lifecycle.release import release
from tcl.control.lifecycle.retry import waiting_for_retry
from tcl.control.lifecycle.stop import stop
from tcl.control.service import Control
from tcl.control.states import AttemptCause, RunState
from tcl.control.sweep.admission import Admission
from tcl.control.sweep.model import Entry, EntryState, error_line
from tcl.control.sweep.placing import TRACE
from tcl.control.sweep.queue import SweepQueue
from tcl.control.sweep.runhold import RunHold
from tcl.control.sweep.storeretry import StoreRetry

log = logging.getLogger("tcl.scheduler")


class EntryWatcher:
    """Its scheduler's collaborators: ``admission`` is told of each run that ended, ``wake``
    set when one did (its GPU is free: the scheduler claims the next entry now)."""

    def __init__(
        self,
        queue: SweepQueue,
        owner: str,
        reconnect_deadline_s: float,
        hold: RunHold,
        store_retry: StoreRetry,
        admission: Admission,
        wake: asyncio.Event,
    ) -> None:
        self.queue = queue
        self.owner = owner
        self.reconnect_deadline_s = reconnect_deadline_s  # a run's host unreachable this long
        self.hold = hold
        self.store_retry = store_retry
        self.admission = admission
        self.wake = wake

    async def outcome(self, ctl: Control, entry: Entry) -> tuple[EntryState, str]:
        """How the entry's run ended (its entry's end and why). Cancelled (its lease is gone):
        a run whose entry the user cancelled is stopped, and what it holds freed."""
        assert entry.run_id is not None
        try:
            return await self._follow_through_outages(ctl, entry.run_id)
        except asyncio.CancelledError:
            # our lease is gone: cancelled by the user (stop its run), or taken by another
            # scheduler (leave the run to it)
            with contextlib.suppress(TclError):
                now = await asyncio.to_thread(self.queue.entry, entry.id)
                if now.state is EntryState.CANCELLED:
                    # no owner while it is stopped: the stop keeps its last events itself;
                    # stopped already (by `tcl matrix cancel`): what it holds is freed here
                    await self.hold.drop(entry.run_id)
                    stopped = await stop(ctl, ctl.store.get_run(entry.run_id), grace_s=5.0)
                    await release(ctl, stopped.id)
            raise
        except RETRYABLE as e:
            # its host did not answer for the whole budget: not the job's verdict (it may go
            # on there). The run ends `terminated` for cause `infra`, so that the entry, the
            # run and `tcl ps` agree; its task, once its host answers, is the orphan sweep's.
            why = f"its host did not answer for {self.reconnect_deadline_s:.0f} s: {error_line(e)}"
            log.warning("entry %s: %s", entry.job_id, why)
            with contextlib.suppress(TclError):
                await asyncio.to_thread(_gave_up, ctl, entry.run_id, why)
            return EntryState.FAILED, why
        except Exception as e:  # a bug: end the entry
            log.exception("following entry %s", entry.job_id)
            return EntryState.FAILED, error_line(e)

    def record_end(self, ctl: Control, entry: Entry, state: EntryState, why: str) -> None:
        assert entry.run_id is not None
        if state is EntryState.QUEUED:
            waiting = ctl.retries.waiting(entry.run_id)
            not_before = waiting.not_before if waiting is not None else 0.0
            self.queue.release(self.owner, entry.id, not_before, why)
        else:
            self.queue.finish(self.owner, entry.id, state, why)

    async def _follow_through_outages(self, ctl: Control, run_id: str) -> tuple[EntryState, str]:
        """:meth:`_follow`, again while the state store does not answer (the run goes on on its
        host meanwhile; following it again resumes after the last event kept)."""
        failures = 0
        while True:
            try:
                return await self._follow(ctl, run_id)
            except StoreError as e:
                log.warning("following run %s: %s; following it again", run_id, e)
                self.store_retry.error(e)
                failures += 1
                await asyncio.sleep(self.store_retry.wait_s(failures))

    async def _follow(self, ctl: Control, run_id: str) -> tuple[EntryState, str]:
        """Pull the run until it ends (done/failed) or waits for a retry (queued)."""
        puller = ResumingPull(self.reconnect_deadline_s, relaunch=False)
        while True:
            run = ctl.store.get_run(run_id)
            if run.state.is_final:
                # its host freed the accelerators as the job ended: the next entry may be
                # placed while this one's task is removed
                self.admission.run_ended()
                self.wake.set()
                if TRACE:
                    log.info("run %s ended %.3f", run_id, time.time())
                with contextlib.suppress(TclError):
                    await release(ctl, run_id)
                if run.state is RunState.SUCCEEDED:
                    return EntryState.DONE, ""
                return EntryState.FAILED, run.message or run.state.value
            if waiting_for_retry(ctl, run):
                self.admission.run_ended()  # its attempt ended: what it held is free
                return EntryState.QUEUED, run.message
            res = await puller.pull(ctl, run)
            if res is None:
                continue  # reconnected after a drop
            if not res.events and res.state is RunState.QUEUED:
                await asyncio.sleep(0.5)  # a queued run's backend may answer without waiting


def _gave_up(ctl: Control, run_id: str, why: str) -> None:
    """End a run whose host did not answer for the whole budget (cause ``infra``)."""
    run = ctl.store.get_run(run_id)
    att = ctl.store.latest_attempt(run_id)
    if att is not None and not run.state.is_final:
        record_state(ctl, run, att, RunState.TERMINATED, None, why, AttemptCause.INFRA)
