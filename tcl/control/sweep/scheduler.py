"""The sweep scheduler: claims queued entries, places each as a tcl run, follows it to its end.

One :class:`Scheduler` per ``tcl serve``; any number of them share a queue. Its loop:

1. reap leases that expired (another scheduler died) and heartbeat its own;
2. claim entries, highest priority first, as many as :class:`Admission` allows (all it has
   room for, or once the cluster is full, about one per run that ended), and place each batch
   in the background with the solver (any host type: one run per free GPU), one priority at a
   time. An entry nothing can take goes back to the queue with the rest of its batch: a full
   cluster costs no churn, and a freed GPU is reused at once (a run's end wakes the loop);
3. a watcher per placed entry pulls its run's events until it ends, frees its host resources,
   and ends the entry: done, failed, or back in the queue when its retry policy places the run
   again (after a backoff; a preemption is not counted as a failure).

An entry claimed after its scheduler died may have a run already: it is adopted (followed to
its end), or, when that run's job never started, placed again as its next attempt; so no
entry runs twice and none is lost.
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
from typing import Any

from tcl.control.backoff import backoff_s, pause
from tcl.control.errors import (
    AgentError,
    NoCapacityError,
    NoPlacementError,
    RunNotFoundError,
    SshConnectError,
    StoreError,
    TclError,
)
from tcl.control.lifecycle.adopt import adopt_placement, interrupted
from tcl.control.lifecycle.pull import ResumingPull
from tcl.control.lifecycle.release import release
from tcl.control.lifecycle.retry import place_waiting, waiting_for_retry
from tcl.control.lifecycle.stop import stop
from tcl.control.lifecycle.submit import Submission, relaunch, stored_request
from tcl.control.runleases import RunLeases
from tcl.control.service import Control
from tcl.control.states import RunState
from tcl.control.store import Run
from tcl.control.sweep.admission import Admission
from tcl.control.sweep.manifest import fill_argv, job_config
from tcl.control.sweep.model import Entry, EntryState
from tcl.control.sweep.queue import SweepQueue
from tcl.control.sweep.shellsafe import field_env
from tcl.control.sweep.spec import MatrixSpec
from tcl.control.sweep.turns import PriorityTurns
from tcl.runner.api import JobRef

log = logging.getLogger("tcl.scheduler")
TRACE = os.environ.get("TCL_TRACE") == "1"  # where a placement's time goes, in the log
REAP_EVERY_S = 1.0
STORE_RETRY_CAP_S = 10.0  # the state store unreachable: ask again within this long
MAX_CLAIMS = 20  # an entry whose placement failed this often (hosts dropping it) fails


@dataclass(frozen=True)
class SchedulerSettings:
    lease_s: float = 30.0  # an entry whose scheduler is silent this long goes back to the queue
    heartbeat_s: float = 5.0
    batch: int = 16  # entries claimed at once
    full_wait_s: float = 2.0  # nothing could be placed: claim again after this (or a run's end)
    reconnect_deadline_s: float = 300.0  # a run's host unreachable this long: its entry fails
    store_retry_s: float = 0.5  # the state store unreachable: first wait before asking again


def scheduler_id() -> str:
    return f"{socket.gethostname()[:40]}-{secrets.token_hex(4)}"


class Scheduler:
    """``control_for(config_path, config_named)``: the Control a matrix's runs are placed
    with (the daemon shares its SSH pool and store across them)."""

    def __init__(
        self,
        queue: SweepQueue,
        control_for: Callable[[str, bool], Control],
        settings: SchedulerSettings | None = None,
        owner: str | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.queue = queue
        # told of each error the loop survives (its supervisor shows them in the status)
        self.on_error = on_error
        self.control_for = control_for
        self.settings = settings or SchedulerSettings()
        self.owner = owner or scheduler_id()
        self.watchers: dict[int, asyncio.Task[None]] = {}  # entry id -> its follower
        self.placed = 0
        self._wake = asyncio.Event()
        self._specs: dict[str, MatrixSpec] = {}
        self._refusals: dict[int, str] = {}  # entry id -> why nothing could place it
        self.admission = Admission(self.settings.batch, self.settings.full_wait_s)
        self._placing = 0  # entries claimed and being placed
        self._batches: set[asyncio.Task[None]] = set()
        self.turns = PriorityTurns()  # one priority at a time across batches
        # the runs of the entries it follows: it holds their leases (their one owner, so a
        # `tcl ps`, `tcl logs` or follow reads what it keeps instead of pulling them too)
        self._run_leases: RunLeases | None = None
        self._runs: dict[int, str] = {}  # entry id -> run id, for the entries it follows
        self._in_hand: set[int] = set()  # entries it claimed and still places or follows
        self._placing_runs: set[str] = set()  # runs one of its placements works on now

    @property
    def run_leases(self) -> RunLeases:
        if self._run_leases is None:
            self._run_leases = RunLeases(self.queue.store)
        return self._run_leases

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
                    wait_s = max(wait_s, self._store_wait_s(store_failures))
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
                self.queue.claim, self.owner, limit, self.settings.lease_s
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
        if self.on_error is not None:
            self.on_error(e)

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
            run_id = self._runs.pop(entry_id, None)
            if run_id is not None:
                await self._drop_run(run_id)

    def busy(self) -> bool:
        return bool(self.watchers) or self._placing > 0

    async def _heartbeats(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.settings.heartbeat_s)
            try:
                held = await asyncio.to_thread(
                    self.queue.heartbeat, self.owner, self.settings.lease_s, set(self._in_hand)
                )
            except TclError as e:
                log.warning("heartbeat failed: %s", e)
                self._error(e)
                continue
            for entry_id, task in list(self.watchers.items()):
                if entry_id not in held:  # cancelled by the user, or reaped: let it go
                    task.cancel()
                    gone = self._runs.pop(entry_id, None)
                    if gone is not None:  # its run goes with it (to the next claimer)
                        await self._drop_run(gone)
            runs = {self._runs[e] for e in held if e in self._runs}
            if runs:
                with contextlib.suppress(StoreError):
                    await asyncio.to_thread(
                        self.run_leases.renew, self.owner, runs, self.settings.lease_s
                    )

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
                        await self._until_stored(self.queue.release, self.owner, e.id, 0.0, why)
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
            self._refusals[entry.id] = _line(e)
            return False
        except StoreError as e:
            # the state store stopped answering mid-placement: not the entry's fault, and how
            # far it got is unknown; back to the queue once the store answers (the next claim
            # adopts what was placed: a started job is followed, not started twice)
            log.warning("placing entry %s: %s; queued again", entry.job_id, e)
            self._error(e)
            why = f"the state store did not answer while placing it: {_line(e)}"
            await self._until_stored(self.queue.release, self.owner, entry.id, 0.0, why)
        except (AgentError, SshConnectError) as e:
            # a host that dropped a connection mid-placement (its launch undid its task): not
            # the entry's fault; it goes back to the queue, a while later, up to a limit
            if entry.claims < MAX_CLAIMS:
                later = time.time() + self.settings.full_wait_s
                await self._until_stored(self.queue.release, self.owner, entry.id, later, _line(e))
                return True
            log.exception("entry %s (%s)", entry.id, entry.job_id)
            why = f"placing it failed {entry.claims} times; last: {_line(e)}"
            await self._until_stored(
                self.queue.finish, self.owner, entry.id, EntryState.FAILED, why
            )
        except Exception as e:  # an entry's own failure ends that entry
            log.exception("entry %s (%s)", entry.id, entry.job_id)
            await self._until_stored(
                self.queue.finish, self.owner, entry.id, EntryState.FAILED, _line(e)
            )
        return True

    # one entry --------------------------------------------------------------------------------

    def spec(self, matrix: str) -> MatrixSpec:
        spec = self._specs.get(matrix)
        if spec is None:
            spec = MatrixSpec.model_validate(self.queue.matrix(matrix).spec)
            self._specs[matrix] = spec
        return spec

    async def _start(self, entry: Entry) -> bool:
        """Place the entry's run (or adopt it) and start its watcher; False when the entry
        went back to the queue (its run waits for a retry's backoff). One placement of a run
        at a time: a second one (the entry claimed again while its first placement goes on)
        would take the first one's attempt for an interrupted one and undo it."""
        assert entry.run_id is not None
        if entry.run_id in self._placing_runs:
            log.warning("entry %s: its run is being placed already; later", entry.job_id)
            raise NoPlacementError(f"its run {entry.run_id} is being placed already", [])
        self._placing_runs.add(entry.run_id)
        try:
            return await self._start_placing(entry)
        finally:
            self._placing_runs.discard(entry.run_id)

    async def _start_placing(self, entry: Entry) -> bool:
        spec = self.spec(entry.matrix)
        ctl = self.control_for(spec.config_path, spec.config_named)
        assert entry.run_id is not None
        try:
            run: Run | None = ctl.store.get_run(entry.run_id)
        except RunNotFoundError:
            run = None
        if run is None:
            sub = _submission(spec, entry)
            ctl.store.create_run(
                entry.run_id,
                sub.name,
                stored_request(sub, spec.job_cwd),
                code_sha256=spec.code_sha256,
            )
            # its lease while it is placed: another scheduler or a controller that finds it
            # pending leaves it alone until this one recorded it or died
            await self._take_run(entry.run_id)
            try:
                await self._place(ctl, entry.run_id)
            except NoPlacementError:
                # nothing placed: no run to show in `tcl ps` until one is (the id is kept)
                await self._drop_run(entry.run_id)
                with contextlib.suppress(TclError):
                    ctl.store.delete_run(entry.run_id)
                raise
            except BaseException:
                await self._drop_run(entry.run_id)
                raise
        else:
            await self._take_run(run.id)
            try:
                if not await self._resume(ctl, entry, run):
                    await self._drop_run(run.id)
                    return False
            except BaseException:
                await self._drop_run(run.id)
                raise
        if not await asyncio.to_thread(self.queue.started, self.owner, entry.id):
            await self._drop_run(entry.run_id)
            return False  # cancelled meanwhile: its watcher would only stop it
        self._runs[entry.id] = entry.run_id
        self.watchers[entry.id] = asyncio.create_task(self._watch(ctl, entry))
        return True

    async def _resume(self, ctl: Control, entry: Entry, run: Run) -> bool:
        """An entry claimed again whose run exists: place it again when it waits for a retry
        that is due, adopt a placement its scheduler did not record; False when the entry
        went back to the queue (the retry is not due)."""
        if run.state in (RunState.PENDING, RunState.PROVISIONING) or interrupted(ctl, run):
            # its scheduler died before or while placing it (perhaps after its job started)
            await self._adopt_placement(ctl, run)
        elif waiting_for_retry(ctl, run):
            waiting = ctl.retries.waiting(run.id)
            if waiting is not None and not waiting.due:
                await asyncio.to_thread(
                    self.queue.release, self.owner, entry.id, waiting.not_before, waiting.why
                )
                return False
            if not await place_waiting(ctl, run.id):
                waiting = ctl.retries.waiting(run.id)
                if waiting is not None:  # nothing free: like a first placement's refusal
                    raise NoPlacementError(waiting.why or "nothing free", [])
        return True

    async def _take_run(self, run_id: str) -> None:
        """Own the run (its lease); another live owner (a scheduler whose entry lease lapsed
        before its run lease did): not now, the entry goes back to the queue."""
        taken = await asyncio.to_thread(
            self.run_leases.take, self.owner, run_id, self.settings.lease_s
        )
        if not taken:
            raise NoPlacementError(f"run {run_id} is still owned by another controller", [])

    async def _drop_run(self, run_id: str) -> None:
        with contextlib.suppress(StoreError):
            await asyncio.to_thread(self.run_leases.drop, self.owner, run_id)

    async def _place(self, ctl: Control, run_id: str) -> None:
        try:
            await relaunch(ctl, run_id)
        except NoCapacityError as e:
            raise NoPlacementError(str(e), []) from None
        except (NoPlacementError, AgentError, SshConnectError):
            raise  # nothing free now, or a host dropped it: the entry goes back to the queue
        except TclError as e:  # refused for good (a config error, a host unknown): it fails
            if not ctl.store.get_run(run_id).state.is_final:
                ctl.store.set_state(run_id, RunState.FAILED, message=_line(e))
            raise

    async def _adopt_placement(self, ctl: Control, run: Run) -> None:
        """A run whose scheduler died before recording its placement: followed when its job
        started; else placed again (:mod:`tcl.control.lifecycle.adopt`). Unsure (the host
        does not answer): later."""
        if await adopt_placement(ctl, run, ctl.store.latest_attempt(run.id)):
            return  # its job started: the watcher follows it
        if run.state is RunState.PROVISIONING:
            ctl.store.set_state(
                run.id,
                RunState.QUEUED,
                message="its scheduler stopped while placing it; placing it again",
            )
        try:
            await self._place(ctl, run.id)
        except NoPlacementError as e:
            # its attempt is undone and nothing is free now: the run waits to be placed, as
            # after a preemption (the next claim places it; following it now would only
            # find the attempt that was undone)
            if ctl.store.get_run(run.id).state is RunState.QUEUED:
                why = f"placing it again: {_line(e)}"
                ctl.retries.wait(run.id, 0.0, False, why)
                ctl.store.set_state(run.id, RunState.WAITING_RETRY, message=why)
            raise

    async def _watch(self, ctl: Control, entry: Entry) -> None:
        assert entry.run_id is not None
        try:
            state, why = await self._follow_through_outages(ctl, entry.run_id)
        except asyncio.CancelledError:
            # our lease is gone: cancelled by the user (stop its run), or taken by another
            # scheduler (leave the run to it)
            with contextlib.suppress(TclError):
                now = await asyncio.to_thread(self.queue.entry, entry.id)
                if now.state is EntryState.CANCELLED:
                    # no owner while it is stopped: the stop keeps its last events itself;
                    # stopped already (by `tcl matrix cancel`): what it holds is freed here
                    await self._drop_run(entry.run_id)
                    stopped = await stop(ctl, ctl.store.get_run(entry.run_id), grace_s=5.0)
                    await release(ctl, stopped.id)
            raise
        except Exception as e:  # its host is gone for good, a bug: end the entry
            log.exception("following entry %s", entry.job_id)
            state, why = EntryState.FAILED, _line(e)
        finally:
            if self.watchers.get(entry.id) is asyncio.current_task():
                del self.watchers[entry.id]
                self._in_hand.discard(entry.id)
            self._wake.set()  # its GPU is free: claim the next entry now
        await self._until_stored(self._record_end, ctl, entry, state, why)
        self._runs.pop(entry.id, None)
        await self._drop_run(entry.run_id)

    def _record_end(self, ctl: Control, entry: Entry, state: EntryState, why: str) -> None:
        assert entry.run_id is not None
        if state is EntryState.QUEUED:
            waiting = ctl.retries.waiting(entry.run_id)
            not_before = waiting.not_before if waiting is not None else 0.0
            self.queue.release(self.owner, entry.id, not_before, why)
        else:
            self.queue.finish(self.owner, entry.id, state, why)

    async def _until_stored(self, write: Callable[..., object], *args: Any) -> None:
        """Run ``write(*args)`` (in a thread) until the state store takes it: an outage delays
        the entry's end, never loses it (cancelled: the lease expires and the next scheduler
        that adopts the entry records it)."""
        failures = 0
        while True:
            try:
                await asyncio.to_thread(write, *args)
                return
            except StoreError as e:
                self._error(e)
                failures += 1
                await asyncio.sleep(self._store_wait_s(failures))

    def _store_wait_s(self, failures: int) -> float:
        return backoff_s(failures - 1, self.settings.store_retry_s, STORE_RETRY_CAP_S)

    async def _follow_through_outages(self, ctl: Control, run_id: str) -> tuple[EntryState, str]:
        """:meth:`_follow`, again while the state store does not answer (the run goes on on its
        host meanwhile; following it again resumes after the last event kept)."""
        failures = 0
        while True:
            try:
                return await self._follow(ctl, run_id)
            except StoreError as e:
                log.warning("following run %s: %s; following it again", run_id, e)
                self._error(e)
                failures += 1
                await asyncio.sleep(self._store_wait_s(failures))

    async def _follow(self, ctl: Control, run_id: str) -> tuple[EntryState, str]:
        """Pull the run until it ends (done/failed) or waits for a retry (queued)."""
        puller = ResumingPull(self.settings.reconnect_deadline_s, relaunch=False)
        while True:
            run = ctl.store.get_run(run_id)
            if run.state.is_final:
                # its host freed the accelerators as the job ended: the next entry may be
                # placed while this one's task is removed
                self.admission.run_ended()
                self._wake.set()
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


def _submission(spec: MatrixSpec, entry: Entry) -> Submission:
    job = None
    argv: list[str] = []
    if spec.job is not None:
        job = JobRef(
            key=spec.job.key,
            config_yaml=job_config(spec.job.config_yaml, entry.fields),
            restore=spec.job.restore,
        )
    else:
        argv = fill_argv(spec.argv, entry.fields, entry.job_id)
    return Submission(
        argv=argv,
        name=run_name(entry),
        chip=spec.chip,
        chips=spec.chips,
        nodes=spec.nodes,
        host=spec.host,
        image=spec.image,
        env={
            **spec.env,
            **field_env(entry.fields),
            "TCL_MATRIX": entry.matrix,
            "TCL_MATRIX_JOB_ID": entry.job_id,
        },
        job=job,
        yes=True,
        job_cwd=spec.job_cwd,
        max_duration_s=spec.max_duration_s,
        retry=spec.retry,
    )


def run_name(entry: Entry) -> str:
    """``MATRIX.JOB_ID``: a ``tcl.jobs`` job's checkpoint folder too, so no ``/`` in it."""
    return f"{entry.matrix}.{entry.job_id}".replace("/", "-")[:256]


def _line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:2048]
