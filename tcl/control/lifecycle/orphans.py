"""The orphan sweep: tasks on hosts that no attempt of a run names, ended and removed.

A placement writes its tasks' names into its attempt before it asks the host to make them, and
undoes what it made when it fails. What can still be left holds accelerators nobody frees: an
undo or a release that could not reach the host, an attempt discarded after its host made the
task. The daemon's ``orphans`` loop (``tcl serve --status``) looks every ``every_s`` at the
hosts of this store's latest attempts. A task whose name says it is for one of this store's
runs (another user's tasks on a shared host are never touched) is ended and removed when it is
older than ``min_age_s`` and

- no attempt of its number exists (discarded), or that attempt names another task;
- or its attempt ended and was released (the release could not reach it), ended for cause
  ``infra`` (given up on while its host did not answer) or ``placement_failed`` (a placement
  undone or found not started by its adopter, whose release did not reach it), or ended with
  no handle at all.

A sweep asks only hosts where something may be left: those of a live attempt or of a run
that moved within ``recent_s``. It never starts a shim to ask (a stopped local shim holds
nothing). Each orphan is ended on its own (one that cannot be reached does not keep the next
one holding its chips). A task any live attempt of its run names is left alone whatever its
name says (a SLURM requeue is attempt 1 of the job named for attempt 0). Shim hosts, SLURM
clusters (this user's jobs named ``tcl-<run>-<attempt>``, ended with ``scancel``) and Volcano
hosts (the vcjobs in the host's namespace labelled with their run and attempt, deleted with their
spec Secret) and TPU hosts (the shim tasks on every worker of a READY node; the node itself
is kept for the next run, as a release keeps it) are swept; the tasks of a multi-node launch
are swept on the hosts its attempt row names.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tcl.control.backends.base import HostTask
from tcl.control.backoff import pause
from tcl.control.errors import StoreError, TclError
from tcl.control.service import Control
from tcl.control.states import AttemptCause

if TYPE_CHECKING:
    from tcl.control.store import Attempt, Run, Store

log = logging.getLogger(__name__)

_LET_GO = frozenset({AttemptCause.INFRA, AttemptCause.PLACEMENT_FAILED})


@dataclass(frozen=True)
class OrphanSettings:
    every_s: float = 60.0  # between sweeps
    min_age_s: float = 60.0  # a task younger than this is left alone (a placement's own)
    recent_runs: int = 500  # the hosts of this many latest runs are swept...
    recent_s: float = 6 * 3600.0  # ...when their attempt is live or the run moved this recently


def orphaned(ctl: Control, task: HostTask, att: Attempt | None) -> bool:
    """Whether no live attempt names ``task`` (``att``: its run's attempt of that number)."""
    if att is None:
        return True
    if not att.handle:
        return att.state.is_final  # a placement of old that named nothing yet: its own
    handle = ctl.handle(att)
    if not handle.names(task):
        return True
    # ended and released (the release could not reach it), given up on while its host did not
    # answer, or a placement that never started (nobody releases these: their owner let go)
    return att.state.is_final and (handle.released or att.cause in _LET_GO)


def _live_and_names(ctl: Control, att: Attempt, task: HostTask) -> bool:
    return not att.state.is_final and bool(att.handle) and ctl.handle(att).names(task)


async def sweep_host(ctl: Control, kind: str, host: str, min_age_s: float) -> list[str]:
    """End the orphans on ``host`` (of backend ``kind``); their ids."""
    backend = ctl.backend_for_kind(kind)
    tasks = [t for t in await backend.host_tasks(host) if t.age_s >= min_age_s]
    if not tasks:
        return []
    runs = await asyncio.to_thread(ctl.store.runs_by_id, {t.run_id for t in tasks})
    attempts = await asyncio.to_thread(ctl.store.attempts_of, list(runs))
    ended = []
    for task in tasks:
        if task.run_id not in runs:
            continue  # not this store's run: another user's, on a shared host
        atts = attempts.get(task.run_id, [])
        if any(_live_and_names(ctl, a, task) for a in atts):
            continue  # a later attempt of the same job (a SLURM requeue keeps job and name)
        att = next((a for a in atts if a.attempt == task.attempt), None)
        if not orphaned(ctl, task, att):
            continue
        log.warning("%s: task %s: no attempt names it; ending it", host, task.task_id)
        try:
            await backend.end_task(task)
        except TclError as e:  # gone meanwhile, or the host stopped answering: next time
            log.info("%s: task %s not ended: %s", host, task.task_id, e)
            continue
        ended.append(task.task_id)
    return ended


class OrphanSweep:
    """``control_for(run)``: the Control the hosts of a run's attempts are reached with."""

    def __init__(
        self,
        store: Store,
        control_for: Callable[[Run], Control],
        settings: OrphanSettings | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.store = store
        self.control_for = control_for
        self.settings = settings or OrphanSettings()
        self.on_error = on_error

    async def run(self, stopping: asyncio.Event) -> None:
        never = asyncio.Event()
        while True:
            # first after a pause: a daemon starting has its runs to take first
            await pause(never, stopping, self.settings.every_s)
            if stopping.is_set():
                return
            try:
                await self.sweep()
            except StoreError as e:
                log.warning("orphan sweep: %s; next time", e)
                if self.on_error is not None:
                    self.on_error(e)

    async def sweep(self) -> list[str]:
        """One sweep of the latest runs' hosts; the ids of the tasks it ended."""
        runs = await asyncio.to_thread(self.store.list_runs, True, self.settings.recent_runs)
        attempts = await asyncio.to_thread(self.store.attempts_of, [r.id for r in runs])
        since = time.time() - self.settings.recent_s
        hosts: dict[tuple[int, str, str], Control] = {}
        for run in runs:
            atts = [
                a
                for a in attempts.get(run.id, [])
                if run.updated_at >= since or not a.state.is_final
            ]
            if not atts:
                continue  # long settled: its hosts are not asked again
            try:
                ctl = self.control_for(run)
            except TclError:
                continue  # its config is gone or broken: its hosts cannot be reached
            for att in atts:
                hosts.setdefault((id(ctl), att.backend, att.host), ctl)
        ended: list[str] = []
        for (_, kind, host), ctl in hosts.items():
            try:
                ended += await sweep_host(ctl, kind, host, self.settings.min_age_s)
            except TclError as e:  # unreachable, or no longer in its config: next time
                log.debug("orphan sweep of %s: %s", host, e)
        return ended
