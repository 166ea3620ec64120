"""Following a run: a reader of its log cache, fed by the run's controller.

A follow never advances a run itself. It asks the controller to own the run (the daemon's, or,
without a daemon, one started here for the life of the follow: ``TCL_SERVE=0``), then prints
the kept events after ``after`` and each new one as the owner keeps it, until the run has ended
and its owner let it go (every event kept, its host freed). A run another controller owns is
followed the same way: the owner, not this reader, writes its events to the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from tcl.control.lifecycle.ownership import controller_id
from tcl.control.lifecycle.reconcile import RunController
from tcl.control.logcache import KeptEvent, LogCache
from tcl.control.service import Control

if TYPE_CHECKING:
    from tcl.control.store import Run

WAKE_S = 1.0  # a follow looks at the store at least this often (an owner in another process)


async def follow(
    ctl: Control,
    run: Run,
    on_event: Callable[[KeptEvent], None],
    on_reconnect: Callable[[str], None] | None = None,
    after: int = 0,
    controller: RunController | None = None,
) -> Run:
    """Hand over kept events after ``after``, then new ones until the run ends; the run is
    returned once its owner freed its host resources (a followed ``tcl submit`` returns with
    its accelerators free)."""
    if controller is not None:
        return await _tail(ctl, controller, run.id, on_event, on_reconnect, after)
    here = RunController(ctl.store, lambda _run: ctl, owner=controller_id("follow"), only={run.id})
    stopping = asyncio.Event()
    loop = asyncio.create_task(here.run(stopping))
    try:
        return await _tail(ctl, here, run.id, on_event, on_reconnect, after)
    finally:
        stopping.set()
        with contextlib.suppress(asyncio.CancelledError):
            await loop


async def _tail(
    ctl: Control,
    controller: RunController,
    run_id: str,
    on_event: Callable[[KeptEvent], None],
    on_reconnect: Callable[[str], None] | None,
    after: int,
) -> Run:
    cache = LogCache(run_id)
    last = after
    trouble = ""
    while True:
        await controller.adopt(run_id)  # again each time: another owner may have died
        changed = controller.changed(run_id)
        for e in cache.read(last):
            on_event(e)
            last = e.seq
        now = controller.trouble.get(run_id, "")
        if now and now != trouble and on_reconnect is not None:
            on_reconnect(now)
        trouble = now
        current = ctl.store.get_run(run_id)
        ended = current.state.is_final and not controller.owns(run_id)
        if ended and not await asyncio.to_thread(controller.owned_elsewhere, run_id):
            for e in cache.read(last):  # what its owner kept after the read above
                on_event(e)
            return ctl.store.get_run(run_id)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), WAKE_S)
