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
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING

from tcl.control.lifecycle.ownership import controller_id
from tcl.control.lifecycle.reconcile import RunController
from tcl.control.logcache import LogCache, LogTail
from tcl.control.service import Control

if TYPE_CHECKING:
    from tcl.control.logcache import KeptEvent
    from tcl.control.store import Run

WAKE_S = 1.0  # a follow looks at the store at least this often (an owner in another process)
READ_BATCH = 256  # kept events handed over per read
INLINE_READ_BYTES = 64 * 1024  # more appended than this since the last read: read in a thread

# What is given each event: a callback, or a coroutine function (awaited before the next event
# is read: a bounded queue's ``put`` bounds what a follow holds).
Sink = Callable[["KeptEvent"], object]


async def follow(
    ctl: Control,
    run: Run,
    on_event: Sink,
    on_reconnect: Callable[[str], object] | None = None,
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
    on_event: Sink,
    on_reconnect: Callable[[str], object] | None,
    after: int,
) -> Run:
    tail = LogTail(LogCache(run_id).path, after)
    trouble = ""
    while True:
        await controller.adopt(run_id)  # again each time: another owner may have died
        changed = controller.changed(run_id)
        await _hand_over(tail, on_event)
        now = controller.trouble.get(run_id, "")
        if now and now != trouble and on_reconnect is not None:
            await _given(on_reconnect(now))
        trouble = now
        # the run ends once no owner is left (one here tells its end; the store is read only
        # then: a read on every wake held up the lines just handed to the stream)
        ended = not controller.owns(run_id) and ctl.store.get_run(run_id).state.is_final
        if ended and not await asyncio.to_thread(controller.owned_elsewhere, run_id):
            await _hand_over(tail, on_event)  # what its owner kept after the read above
            return ctl.store.get_run(run_id)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(WAKE_S):  # not wait_for: no task between it and the set
                await changed.wait()


async def _hand_over(tail: LogTail, on_event: Sink) -> None:
    """The events kept since the last read, a batch at a time: a long log is read in a thread
    (off the event loop), and a sink that waits (a client slower than the log) makes the read
    wait, never the whole log pile up in memory."""
    while True:
        if tail.pending_bytes() > INLINE_READ_BYTES:
            batch = await asyncio.to_thread(tail.read, READ_BATCH)
        else:
            batch = tail.read(READ_BATCH)
        for e in batch:
            await _given(on_event(e))
        if len(batch) < READ_BATCH:
            return


async def _given(result: object) -> None:
    if inspect.isawaitable(result):
        await result
