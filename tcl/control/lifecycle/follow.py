"""Following a run: its kept events, then new ones as they are pulled, until it ends.

:class:`ResumingPull` survives dropped connections (jittered backoff, the host's connection
reset); :func:`follow` prints through it and returns once the run's host resources are freed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tcl.control.backoff import backoff_s
from tcl.control.lifecycle.pull import RETRYABLE, PullResult, pull
from tcl.control.lifecycle.release import release
from tcl.control.logcache import KeptEvent, LogCache
from tcl.control.service import Control
from tcl.control.states import RunState
from tcl.runner.api import EventKind

if TYPE_CHECKING:
    from tcl.control.store import Run

RECONNECT_DEADLINE_S = 300.0


async def follow(
    ctl: Control,
    run: Run,
    on_event: Callable[[KeptEvent], None],
    on_reconnect: Callable[[str], None] | None = None,
    after: int = 0,
) -> Run:
    """Print kept events after ``after``, then new ones until the run ends; survives drops.

    Events are handed over as soon as they are pulled; the run is returned once its resources
    are released on its host, so when a followed ``tcl submit`` returns its accelerators are
    free."""
    cache = LogCache(run.id)
    for e in cache.read(after):
        on_event(e)
    puller = ResumingPull(RECONNECT_DEADLINE_S, on_reconnect)
    while True:
        current = ctl.store.get_run(run.id)
        if current.state.is_final and _has_final_event(ctl, cache, run.id):
            return current
        res = await puller.pull(ctl, current)
        if res is None:
            continue  # reconnected after a drop
        for ev in res.events:
            on_event(ev)
        if res.state.is_final and not res.more:
            await release(ctl, run.id)
            return ctl.store.get_run(run.id)
        if not res.events and res.state in (RunState.QUEUED, RunState.PENDING):
            # a queued run's backend may answer without waiting, and a run not placed yet
            # has no host to wait on: without a pause this loop would never yield
            await asyncio.sleep(0.2)


class ResumingPull:
    """Long-poll pulls of one run that survive dropped connections: the host's connection is
    reset and the pull tried again after a jittered backoff, until ``deadline_s`` of failures
    in a row (then the error is raised)."""

    def __init__(
        self,
        deadline_s: float,
        on_reconnect: Callable[[str], None] | None = None,
        relaunch: bool = True,
    ) -> None:
        self.deadline_s = deadline_s
        self.on_reconnect = on_reconnect
        self.relaunch = relaunch
        self._failing_since: float | None = None
        self._attempt = 0

    async def pull(self, ctl: Control, run: Run) -> PullResult | None:
        """The next page, or None after a dropped connection (the caller loops)."""
        try:
            res = await pull(ctl, run, wait_s=10.0, release=False, relaunch=self.relaunch)
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


def _has_final_event(ctl: Control, cache: LogCache, run_id: str) -> bool:
    """Every node of the latest attempt has its final state kept (a run whose events were
    never pulled, e.g. stopped before it started, counts as drained)."""
    att = ctl.store.latest_attempt(run_id)
    nodes = ctl.handle(att).node_count if att is not None and att.handle else 1
    last: dict[int, KeptEvent] = {}
    seen = False
    for e in cache.read():
        seen = True
        if e.kind is EventKind.STATE and (att is None or e.attempt == att.attempt):
            last[e.node] = e
    if not seen:
        return True
    return len(last) == nodes and all(
        e.state is not None and e.state.is_final for e in last.values()
    )
