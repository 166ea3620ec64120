"""What a streamed request of the daemon puts on its queue, line by line: a submit's progress,
a run's events as they are kept (``tcl logs -f``, a followed submit), the kept ones only
(``tcl logs``), and the line that ends the stream (its error, if any)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from tcl.control.catchup import catch_up, newest_run_id
from tcl.control.daemon.api import Line, LineKind, RunEnd
from tcl.control.errors import SubmitCancelled, TclError
from tcl.control.lifecycle.follow import follow
from tcl.control.logcache import KeptEvent, LogCache
from tcl.runner.api import EventKind

if TYPE_CHECKING:
    from tcl.control.lifecycle.reconcile import RunController
    from tcl.control.service import Control

log = logging.getLogger("tcl.serve")
# Every stream's queue holds at most STREAM_QUEUE lines: a client slower than the log makes its
# read wait (`tcl logs`: the kept events are read from the file KEPT_BATCH at a time, in a
# thread; `tcl logs -f`, a followed submit: the follow waits, its events stay in the kept log),
# never the daemon hold the whole log. A submit's progress lines stop going in
# PROGRESS_HEADROOM short of full, so its status lines and notes (a few) always find room.
KEPT_BATCH = 256
STREAM_QUEUE = 2 * KEPT_BATCH
PROGRESS_HEADROOM = 64


class QueueObserver:
    """The submit's progress, as lines of its stream (a bounded queue: an upload's progress
    lines are left out while the client is behind, leaving room for the few others)."""

    def __init__(self, queue: asyncio.Queue[Line | None]) -> None:
        self.queue = queue

    def status(self, text: str) -> None:
        self.queue.put_nowait(Line(kind=LineKind.STATUS, text=text))

    def progress(self, done: int, total: int) -> None:
        if self.queue.qsize() < self.queue.maxsize - PROGRESS_HEADROOM:
            self.queue.put_nowait(Line(kind=LineKind.PROGRESS, done=done, total=total))

    def note(self, text: str) -> None:
        self.queue.put_nowait(Line(kind=LineKind.NOTE, text=text))


async def follow_into(
    ctl: Control,
    run_ref: str,
    after: int,
    queue: asyncio.Queue[Line | None],
    controller: RunController | None,
) -> None:
    async def on_event(e: KeptEvent) -> None:
        await queue.put(Line(kind=LineKind.EVENT, event=e))  # waits while the queue is full

    async def on_reconnect(why: str) -> None:
        await queue.put(Line(kind=LineKind.RECONNECTING, text=why))

    run = await asyncio.to_thread(ctl.store.resolve, run_ref)  # the store: off the event loop
    final = await follow(ctl, run, on_event, on_reconnect, after=after, controller=controller)
    end = RunEnd(run_id=final.id, state=final.state.value, exit_code=final.exit_code)
    await queue.put(Line(kind=LineKind.END, run=end))


async def kept_into(
    ctl: Control, run_ref: str, after: int, queue: asyncio.Queue[Line | None]
) -> None:
    """``tcl logs`` without ``-f``: the host asked for what is not kept yet (unless the run's
    controller keeps it), then the kept log events after ``after``, then ``end``."""
    if not run_ref:
        run_ref = await asyncio.to_thread(newest_run_id, ctl)
        await queue.put(Line(kind=LineKind.NOTE, text=f"logs of the most recent run, {run_ref}"))
    caught = await catch_up(ctl, run_ref)
    if caught.unreachable:
        text = f"warning: {caught.unreachable}; showing kept logs"
        await queue.put(Line(kind=LineKind.NOTE, text=text))
    kept = LogCache(caught.run_id).read(after=after, kind=EventKind.LOG)
    while batch := await asyncio.to_thread(_take, kept, KEPT_BATCH):
        for e in batch:
            await queue.put(Line(kind=LineKind.EVENT, event=e))  # waits while the queue is full
    run = await asyncio.to_thread(ctl.store.get_run, caught.run_id)
    end = RunEnd(run_id=run.id, state=run.state.value, exit_code=run.exit_code)
    await queue.put(Line(kind=LineKind.END, run=end))


def _take(events: Iterator[KeptEvent], n: int) -> list[KeptEvent]:
    return list(itertools.islice(events, n))


async def reported(work: Callable[[], Awaitable[None]], queue: asyncio.Queue[Line | None]) -> None:
    """Run ``work``; its failure becomes the stream's last line. The stream ends after it.
    (A bounded ``queue`` makes these waits for room; cancelled, the end goes in at once.)"""
    last: Line | None = None
    try:
        await work()
    except SubmitCancelled as e:
        last = Line(kind=LineKind.ERROR, text=str(e), exit_code=e.exit_code, cancelled=True)
    except TclError as e:
        last = Line(kind=LineKind.ERROR, text=str(e), exit_code=e.exit_code)
    except asyncio.CancelledError:
        if queue.full():  # the stream may still read (a cancelled follow): it must end
            queue.get_nowait()
        queue.put_nowait(None)
        raise
    except Exception as e:  # a bug: the user sees one line, the daemon's log the traceback
        log.exception("request failed")
        text = f"tcl serve failed: {type(e).__name__}: {e} (see its log)"
        last = Line(kind=LineKind.ERROR, text=text)
    if last is not None:
        await queue.put(last)
    await queue.put(None)
