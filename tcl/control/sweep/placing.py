"""Placing one claimed entry's run: a new run placed with the solver, or, for an entry claimed
again whose run exists (its scheduler died, or the run waits for a retry), that run adopted or
placed again as its next attempt; so no entry runs twice and none is lost. The placer holds the
run's lease while it places it; once placed, the run is its run controller's to own."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable

from tcl.control.errors import (
    AgentError,
    NoCapacityError,
    NoPlacementError,
    RunNotFoundError,
    SshConnectError,
    TclError,
)
from tcl.control.lifecycle.adopt import adopt_placement, interrupted
from tcl.control.lifecycle.retry import place_waiting, waiting_for_retry
from tcl.control.lifecycle.submit import relaunch, stored_request
from tcl.control.service import Control
from tcl.control.states import RunState
from tcl.control.store import Run
from tcl.control.sweep.model import Entry, error_line
from tcl.control.sweep.queue import SweepQueue
from tcl.control.sweep.runhold import RunHold
from tcl.control.sweep.spec import MatrixSpec
from tcl.control.sweep.submission import submission

log = logging.getLogger("tcl.scheduler")
TRACE = os.environ.get("TCL_TRACE") == "1"  # where a placement's time goes, in the log


class EntryPlacer:
    """``control_for(config_path, config_named)``: the Control a matrix's runs are placed
    with (the daemon shares its SSH pool and store across them)."""

    def __init__(
        self,
        queue: SweepQueue,
        owner: str,
        control_for: Callable[[str, bool], Control],
        hold: RunHold,
    ) -> None:
        self.queue = queue
        self.owner = owner
        self.control_for = control_for
        self.hold = hold
        self._specs: dict[str, MatrixSpec] = {}
        self._placing_runs: set[str] = set()  # runs one of its placements works on now

    @property
    def placing_runs(self) -> frozenset[str]:
        """The runs its placements work on now (their leases are renewed meanwhile)."""
        return frozenset(self._placing_runs)

    def spec(self, matrix: str) -> MatrixSpec:
        spec = self._specs.get(matrix)
        if spec is None:
            spec = MatrixSpec.model_validate(self.queue.matrix(matrix).spec)
            self._specs[matrix] = spec
        return spec

    async def start(self, entry: Entry) -> Control | None:
        """Place the entry's run (or adopt it) and mark the entry running; the Control its run
        is followed with, None when the entry went back to the queue (its run waits for a
        retry's backoff) or was cancelled meanwhile. One placement of a run at a time: a
        second one (the entry claimed again while its first placement goes on) would take the
        first one's attempt for an interrupted one and undo it."""
        assert entry.run_id is not None
        if entry.run_id in self._placing_runs:
            log.warning("entry %s: its run is being placed already; later", entry.job_id)
            raise NoPlacementError(f"its run {entry.run_id} is being placed already", [])
        self._placing_runs.add(entry.run_id)
        try:
            return await self._start_placing(entry)
        finally:
            self._placing_runs.discard(entry.run_id)

    async def _start_placing(self, entry: Entry) -> Control | None:
        spec = self.spec(entry.matrix)
        ctl = self.control_for(spec.config_path, spec.config_named)
        assert entry.run_id is not None
        try:
            run: Run | None = ctl.store.get_run(entry.run_id)
        except RunNotFoundError:
            run = None
        if run is None:
            sub = submission(spec, entry)
            ctl.store.create_run(
                entry.run_id,
                sub.name,
                stored_request(sub, spec.job_cwd),
                code_sha256=spec.code_sha256,
            )
            # its lease while it is placed: another scheduler or a controller that finds it
            # pending leaves it alone until this one recorded it or died
            await self.hold.take(entry.run_id)
            try:
                await self._place(ctl, entry.run_id)
            except NoPlacementError:
                # nothing placed: no run to show in `tcl ps` until one is (the id is kept;
                # its lease first: a run with a lease is kept)
                await self.hold.drop(entry.run_id)
                with contextlib.suppress(TclError):
                    ctl.store.delete_run(entry.run_id)
                raise
            finally:
                await self.hold.drop(entry.run_id)  # placed: its run controller's now
        elif not await self._resume(ctl, entry, run):
            return None
        if not await asyncio.to_thread(self.queue.started, self.owner, entry.id):
            return None  # cancelled meanwhile: its watcher would only stop it
        return ctl

    async def _resume(self, ctl: Control, entry: Entry, run: Run) -> bool:
        """An entry claimed again whose run exists: place it again when it waits for a retry
        that is due, adopt a placement its scheduler did not record (holding the run's lease
        meanwhile); a placed run is its controller's, and only watched. False when the entry
        went back to the queue (the retry is not due)."""
        placing = run.state is RunState.PENDING or interrupted(ctl.store, run)
        if not placing and not waiting_for_retry(ctl, run):
            return True  # placed (its scheduler died after recording it): watched
        await self.hold.take(run.id)
        try:
            return await self._place_claimed_again(ctl, entry, run)
        finally:
            await self.hold.drop(run.id)

    async def _place_claimed_again(self, ctl: Control, entry: Entry, run: Run) -> bool:
        if run.state is RunState.PENDING or interrupted(ctl.store, run):
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

    async def _place(self, ctl: Control, run_id: str) -> None:
        try:
            await relaunch(ctl, run_id)
        except NoCapacityError as e:
            raise NoPlacementError(str(e), []) from None
        except (NoPlacementError, AgentError, SshConnectError):
            raise  # nothing free now, or a host dropped it: the entry goes back to the queue
        except TclError as e:  # refused for good (a config error, a host unknown): it fails
            if not ctl.store.get_run(run_id).state.is_final:
                ctl.store.set_state(run_id, RunState.FAILED, message=error_line(e))
            raise

    async def _adopt_placement(self, ctl: Control, run: Run) -> None:
        """A run whose scheduler died before recording its placement: followed when its job
        started; else placed again (:mod:`tcl.control.lifecycle.adopt`). Unsure (the host
        does not answer): later."""
        if await adopt_placement(ctl, run, ctl.store.latest_attempt(run.id)):
            return  # its job started: its controller follows it
        if run.state is RunState.PROVISIONING:  # it said placed before its attempt named any
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
                why = f"placing it again: {error_line(e)}"
                ctl.retries.wait(run.id, 0.0, False, why)
                ctl.store.set_state(run.id, RunState.WAITING_RETRY, message=why)
            raise
