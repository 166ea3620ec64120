"""A run's kept events brought up to date without following it (``tcl logs``, ``tcl metrics``).

A catch-up pulls page after page until its host has nothing newer (no long-poll, no
relaunch); a host that cannot be reached leaves what is kept, and says why. What is kept
stays readable after the host is gone. A run a controller owns is not pulled here: its owner
keeps the cache up to date.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tcl.control.errors import TclError
from tcl.control.logcache import LogCache
from tcl.runner.api import EventKind

if TYPE_CHECKING:
    from tcl.control.service import Control

MAX_PAGES = 1000  # a catch-up of a host that keeps answering "more" still ends


@dataclass(frozen=True)
class CaughtUp:
    run_id: str
    unreachable: str | None = None  # why the host was not reached ("gpu1 unreachable (…)")


def newest_run_id(ctl: Control) -> str:
    """What ``logs`` and ``metrics`` show without a RUN: the newest run."""
    runs = ctl.store.list_runs(limit=1)
    if not runs:
        raise TclError("no runs yet: tcl submit -- COMMAND")
    return runs[0].id


async def catch_up(ctl: Control, ref: str) -> CaughtUp:
    """Resolve ``ref`` (id, prefix or name) and keep what its host has that is not kept yet."""
    from tcl.control.lifecycle.pull import pull
    from tcl.control.runleases import RunLeases

    run = await asyncio.to_thread(ctl.store.resolve, ref)  # the store: off the event loop
    if run.host is None:
        return CaughtUp(run.id)
    leases = await asyncio.to_thread(RunLeases(ctl.store).of, [run.id])
    lease = leases.get(run.id)
    if lease is not None and lease.live():
        return CaughtUp(run.id)  # its controller keeps the cache up to date (its one writer)
    try:
        for _ in range(MAX_PAGES):
            res = await pull(
                ctl, await asyncio.to_thread(ctl.store.get_run, run.id), relaunch=False
            )
            if not res.more:
                break
    except TclError as e:
        return CaughtUp(run.id, f"{run.host} unreachable ({str(e).splitlines()[0]})")
    return CaughtUp(run.id)


def keep_cached_metrics(ctl: Control, run_id: str) -> int:
    """Put the metric events of the local log cache that the store lacks into it (a pull
    that stopped between keeping its events and their points); returns how many."""
    kept = list(LogCache(run_id).read(kind=EventKind.METRIC))
    if not kept or ctl.metrics.counts([run_id]).get(run_id, 0) >= len(kept):
        return 0
    return ctl.metrics.add(run_id, kept)
