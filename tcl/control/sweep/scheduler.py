"""The sweep scheduler: claims queued entries, places each as a tcl run, follows it to its end.

One :class:`Scheduler` per ``tcl serve``; any number of them share a queue. Its loop:

1. reap leases that expired (another scheduler died) and heartbeat its own;
2. claim entries, highest priority first, as many as :class:`Admission` allows (all it has
   room for, or once the cluster is full, about one per run that ended), and place each batch
   in the background with the solver (any host type: one run per free GPU), one priority at a
   time. An entry nothing can take goes back to the queue with the rest of its batch: a full
   cluster costs no churn, and a freed GPU is reused at once (a run's end wakes the loop);
3. a placed entry's run is owned by the daemon's run controller (it pulls its events, records
   its end and frees its host resources, like any run's); a watcher per placed entry reads how
   the run ends and ends the entry: done, failed, or back in the queue when its retry policy
   places the run again (after a backoff; a preemption is not counted as a failure).

An entry claimed after its scheduler died may have a run already: it is adopted (followed to
its end), or, when that run's job never started, placed again as its next attempt; so no
entry runs twice and none is lost.

This module is the loop and what it holds (the entries in hand, their watchers, their runs);
one entry's placement is :mod:`~tcl.control.sweep.placing`, following its run to its end
:mod:`~tcl.control.sweep.watching`, the run it submits :mod:`~tcl.control.sweep.submission`;
the run leases it holds :mod:`~tcl.control.sweep.runhold`, its writes through state store
outages :mod:`~tcl.control.sweep.storeretry`. Only the scheduler changes what it holds: those
are given the collaborators they use and hand back results.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from tcl.control.backoff import pause
from tcl.control.errors import (
    AgentError,
    NoPlacementError,
    SshConnectError,
    StateConflict,
    StoreError,
    TclError,
)
from tcl.control.service import Control
from tcl.control.sweep.admission import Admission
from tcl.control.sweep.model import Entry, EntryState, error_line
from tcl.control.sweep.placing import TRACE, EntryPlacer
from tcl.control.sweep.queue import SweepQueue
from tcl.control.sweep.runhold import RunHold
from tcl.control.sweep.storeretry import StoreRetry
from tcl.control.sweep.tables import NAME_CHARS
from tcl.control.sweep.turns import PriorityTurns
from tcl.control.sweep.watching import EntryWatcher, RunOwner

log = logging.getLogger("tcl.scheduler")
REAP_EVERY_S = 1.0
MAX_CLAIMS = 20  # an entry whose placement failed this often (hosts dropping it) fails


@dataclass(frozen=True)
class SchedulerSettings:
    lease_s: float = 30.0  # an entry whose scheduler is silent this long goes back to the queue
    heartbeat_s: float = 5.0
    batch: int = 16  # entries claimed at once
    full_wait_s: float = 2.0  # nothing could be placed: claim again after this (or a run's end)
    store_retry_s: float = 0.5  # the state store unreachable: first wait before asking again
    # recorded on each entry it claims (the seed's "pod"); default: $TCL_SCHEDULER_NAME or
    # this machine's hostname
    name: str = ""


def scheduler_name() -> str:
    """The default name of this machine's scheduler: ``$TCL_SCHEDULER_NAME`` or its hostname."""
    return (os.environ.get("TCL_SCHEDULER_NAME") or socket.gethostname())[:NAME_CHARS]


def scheduler_id(name: str = "") -> str:
    """A lease owner: the scheduler's name and a part no other scheduler has."""
    return f"{(name or scheduler_name())[:40]}-{secrets.token_hex(4)}"


class Scheduler:
    """``control_for(config_path, config_named)``: the Control a matrix's runs are placed
    with (the daemon shares its SSH pool and store across them); ``runs``: the daemon's run
    controller, which owns the runs once placed (None: another process's does)."""

    def __init__(
        self,
        queue: SweepQueue,
        control_for: Callable[[str, bool], Control],
        settings: SchedulerSettings | None = None,
        owner: str | None = None,
        on_error: Callable[[BaseException], None] | None = None,
        runs: RunOwner | None = None,
    ) -> None:
        self.queue = queue
        self.settings = settings or SchedulerSettings()
        self.name = self.settings.name or scheduler_name()
        self.owner = owner or scheduler_id(self.name)
        self.watchers: dict[int, asyncio.Task[None]] = {}  # entry id -> its follower
        self.placed = 0
        self._wake = asyncio.Event()
        self._refusals: dict[int, str] = {}  # entry id -> why nothing could place it
        self.admission = Admission(self.settings.batch, self.settings.full_wait_s)
        self._placing = 0  # entries claimed and being placed
        self._batches: set[asyncio.Task[None]] = set()
        self.turns = PriorityTurns()  # one priority at a time across batches
        # told of each error the loop survives (its supervisor shows them in the status)
        self.store_retry = StoreRetry(self.settings.store_retry_s, on_error)
        # the runs of the entries it places: it holds their leases while it places them
        self.hold = RunHold(queue, self.owner, self.settings.lease_s)
        self._in_hand: set[int] = set()  # entries it claimed and still places or follows
        self.placer = EntryPlacer(queue, self.owner, control_for, self.hold)
        self.watcher = EntryWatcher(
            queue, self.owner, self.store_retry, self.admission, self._wake, runs
        )

    # the loop ---------------------------------------------------------------------------------

    async def run(self, stopping: asyncio.Event) -> None:
        beats = asyncio.create_task(self._heartbeats(stopping))
        reaped_at = 0.0
        store_failures = 0  # passes in a row the state store did not answer
        try:
            while not stopping.is_set():
                self._wake.clear()  # before claiming: a run that ends meanwhile wakes the next
                try:
                    reaped_at = await self._pass(reaped_at)
                except StoreError as e:
                    # unreachable for now (restarted, failed over): the next pass asks again;
                    # the entries it follows go on, their leases renewed once it answers
                    log.warning("sweep queue: %s; asking again", e)
                    self._error(e)
                    store_failures += 1
                else:
                    store_failures = 0
                wait_s = self.admission.wait_s(time.time())
                if store_failures:
                    wait_s = max(wait_s, self.store_retry.wait_s(store_failures))
                await pause(self._wake, stopping, wait_s)
        finally:
            beats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beats
            for batch in self._batches:
                batch.cancel()
            if self._batches:
                await asyncio.wait(self._batches, timeout=30.0)
            await self._hand_back()

    async def _pass(self, reaped_at: float) -> float:
        """Reap (now and then) and claim what there is room for; when it last reaped."""
        now = time.time()
        if now - reaped_at >= REAP_EVERY_S:
            await asyncio.to_thread(self.queue.reap)
            reaped_at = now
        limit = self.admission.limit(self._placing, now)
        if limit:
            claimed = await asyncio.to_thread(
                self.queue.claim, self.owner, limit, self.settings.lease_s, scheduler=self.name
            )
            claimed = await self._drop_own(claimed)
            self.admission.took(len(claimed))
            if claimed:
                self._in_hand.update(e.id for e in claimed)
                self._placing += len(claimed)
                ticket = self.turns.claimed(e.priority for e in claimed)
                batch = asyncio.create_task(self._place_batch(claimed, ticket))
                self._batches.add(batch)
                batch.add_done_callback(self._batches.discard)
        return reaped_at

    async def _drop_own(self, claimed: list[Entry]) -> list[Entry]:
        """Entries this scheduler still places or follows, claimed again after its late
        heartbeat let their leases lapse (a loaded machine): they stay with their placer or
        watcher, never handled twice; a followed one is marked running again."""
        fresh = []
        for e in claimed:
            if e.id not in self._in_hand:
                fresh.append(e)
            elif e.id in self.watchers:
                await asyncio.to_thread(self.queue.started, self.owner, e.id)
        return fresh

    def _error(self, e: BaseException) -> None:
        self.store_retry.error(e)

    async def _hand_back(self) -> None:
        """Stopping: the entries it follows go back to the queue at once (not after their
        lease), and the next claimer adopts their runs, which go on on their hosts."""
        held = list(self.watchers.items())
        for _, task in held:
            task.cancel()
        if held:
            await asyncio.wait([t for _, t in held], timeout=10.0)
        for entry_id, _ in held:
            with contextlib.suppress(TclError):
                await asyncio.to_thread(
                    self.queue.release,
                    self.owner,
                    entry_id,
                    0.0,
                    "its scheduler stopped; queued again",
                )

    def busy(self) -> bool:
        return bool(self.watchers) or self._placing > 0

    async def _heartbeats(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.settings.heartbeat_s)
            asked = set(self._in_hand)
            try:
                held = await asyncio.to_thread(
                    self.queue.heartbeat, self.owner, self.settings.lease_s, asked
                )
            except TclError as e:
                log.warning("heartbeat failed: %s", e)
                self._error(e)
                continue
            for entry_id, task in list(self.watchers.items()):
                # cancelled by the user, or reaped: let it go (an entry claimed while the
                # heartbeat was on its way was not asked about: its watcher stays)
                if entry_id in asked and entry_id not in held:
                    task.cancel()
            # the runs it is placing: a placement longer than a lease (a loaded machine, a
            # slow host) keeps its run from another scheduler or a controller meanwhile
            runs = self.placer.placing_runs
            if runs:
                await self.hold.renew(set(runs))

    async def _place_batch(self, claimed: list[Entry], ticket: int) -> None:
        """Place a claimed batch, one priority at a time (the entries of one priority at
        once: a lower one never takes the last free GPU while a higher one, of this batch or
        another, is being placed). The first refusal (nothing free) sends it and the rest
        back to the queue."""
        left = list(claimed)
        open_priorities = {e.priority for e in claimed}  # groups PriorityTurns still counts

        def group_done(priority: int, refused: bool) -> None:
            open_priorities.discard(priority)
            self.turns.done(priority, refused)

        try:
            while left:
                priority = left[0].priority
                group = [e for e in left if e.priority == priority]
                if await self.turns.turn(ticket, priority):
                    oks = await asyncio.gather(*map(self._start_or_end, group))
                else:  # a higher priority found nothing free meanwhile: it goes first
                    oks = [False] * len(group)
                    for e in group:
                        self._refusals[e.id] = "entries of a higher priority wait for room"
                left = left[len(group) :]
                self._placing -= len(group)
                refused = [e for e, ok in zip(group, oks, strict=True) if not ok]
                if refused:
                    self.admission.refused(time.time())
                    for e in refused + left:
                        self._in_hand.discard(e.id)  # out of its hands before it is queued
                    for e in refused + left:
                        why = self._refusals.pop(e.id, "")
                        await self.store_retry.until_stored(
                            self.queue.release, self.owner, e.id, 0.0, why
                        )
                    # done only once they are queued again: a batch claimed meanwhile, which
                    # could not claim them, waits for this group and goes back untried
                    for p in {e.priority for e in left}:
                        group_done(p, refused=False)
                    self._placing -= len(left)
                    left = []
                group_done(priority, refused=bool(refused))
        finally:
            self._placing -= len(left)  # cancelled: their leases lapse or are handed back
            for p in list(open_priorities):
                group_done(p, refused=False)
            self.turns.finished(ticket)
            for e in claimed:  # out of its hands unless a watcher follows it now
                if e.id not in self.watchers:
                    self._in_hand.discard(e.id)
            self._wake.set()

    async def _start_or_end(self, entry: Entry) -> bool:
        """False when nothing could place it now (it goes back to the queue)."""
        t0 = time.time()
        try:
            if await self._start(entry):
                self.placed += 1
                self.admission.placed()
                if TRACE:
                    log.info(
                        "entry %s claimed %.3f placed in %.3f s (claimed at %.3f)",
                        entry.job_id,
                        t0,
                        time.time() - t0,
                        entry.created_at,
                    )
        except NoPlacementError as e:
            self._refusals[entry.id] = error_line(e)
            return False
        except StoreError as e:
            # the state store stopped answering mid-placement: not the entry's fault, and how
            # far it got is unknown; back to the queue once the store answers (the next claim
            # adopts what was placed: a started job is followed, not started twice)
            log.warning("placing entry %s: %s; queued again", entry.job_id, e)
            self._error(e)
            why = f"the state store did not answer while placing it: {error_line(e)}"
            await self.store_retry.until_stored(self.queue.release, self.owner, entry.id, 0.0, why)
        except (AgentError, SshConnectError, StateConflict) as e:
            # a host that dropped a connection mid-placement (its launch undid its task), or
            # another scheduler that moved its run meanwhile (the guarded writer refused this
            # one's stale move): not the entry's fault; it goes back to the queue, a while
            # later, up to a limit
            if entry.claims < MAX_CLAIMS:
                later = time.time() + self.settings.full_wait_s
                await self.store_retry.until_stored(
                    self.queue.release, self.owner, entry.id, later, error_line(e)
                )
                return True
            log.exception("entry %s (%s)", entry.id, entry.job_id)
            why = f"placing it failed {entry.claims} times; last: {error_line(e)}"
            await self.store_retry.until_stored(
                self.queue.finish, self.owner, entry.id, EntryState.FAILED, why
            )
        except Exception as e:  # an entry's own failure ends that entry
            log.exception("entry %s (%s)", entry.id, entry.job_id)
            await self.store_retry.until_stored(
                self.queue.finish, self.owner, entry.id, EntryState.FAILED, error_line(e)
            )
        return True

    # one entry --------------------------------------------------------------------------------

    async def _start(self, entry: Entry) -> bool:
        """Place the entry's run (or adopt it) and start its watcher; False when the entry
        went back to the queue (its run waits for a retry's backoff)."""
        ctl = await self.placer.start(entry)
        if ctl is None:
            return False
        assert entry.run_id is not None
        self.watchers[entry.id] = asyncio.create_task(self._watch(ctl, entry))
        return True

    async def _watch(self, ctl: Control, entry: Entry) -> None:
        assert entry.run_id is not None
        try:
            state, why = await self.watcher.outcome(ctl, entry)
        finally:
            if self.watchers.get(entry.id) is asyncio.current_task():
                del self.watchers[entry.id]
                self._in_hand.discard(entry.id)
            self._wake.set()  # its GPU is free: claim the next entry now
        await self.store_retry.until_stored(self.watcher.record_end, ctl, entry, state, why)
