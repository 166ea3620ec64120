"""One follow per run, shared by everyone viewing it.

Two pulls of one run at once in one process would both read the same "last kept" cursor and both
append what their host sends, so the local log cache (the run's permanent record) would keep
those lines twice. So the server runs at most one
:func:`~tcl.control.lifecycle.follow.follow` per run (a :class:`Feed`) and fans its events out to
the viewers' queues; a stop pauses the run's feed while it pulls, then starts it again from where
it was. A feed whose last viewer left is cancelled.

A viewer reads what is kept from the cache itself (any ``after``), then takes from its queue only
what is newer than the last event it sent: it subscribes first, so nothing falls between.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from tcl.control.errors import TclError
from tcl.control.lifecycle.follow import follow
from tcl.control.logcache import KeptEvent, LogCache
from tcl.runner.api import EventKind

if TYPE_CHECKING:
    from tcl.control.store import Run
    from tcl.ui.context import Ui

log = logging.getLogger("tcl.ui")
Message = dict[str, Any]
PLACEMENT_POLL_S = 1.0


def event_message(e: KeptEvent) -> Message | None:
    """The wire form of a kept event; None for those the log view does not show (metrics,
    phases: the run's detail has them)."""
    if e.kind in (EventKind.METRIC, EventKind.PHASE):
        return None
    return {
        "seq": e.seq,
        "ts": e.ts,
        "kind": e.kind.value,
        "node": e.node,
        "nodes": e.nodes,
        "stream": e.stream.value if e.stream else None,
        "data": e.data,
        "state": e.state.value if e.state else None,
        "exit_code": e.exit_code,
    }


async def placed_or_ended(ui: Ui, run_id: str) -> Run:
    """The run once it has a placed attempt (a handle) or has ended: a viewer of a run still
    pending waits here, reading the store only, before its feed starts following."""
    while True:
        run = ui.store.get_run(run_id)
        att = ui.store.latest_attempt(run_id)
        if run.state.is_final or (att is not None and att.handle):
            return run
        await asyncio.sleep(PLACEMENT_POLL_S)


class Feed:
    """The events of one run's follow, copied to each viewer's queue (None: the feed ended)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.queues: set[asyncio.Queue[Message | None]] = set()
        self.cursor: int | None = None  # the last seq handed over (where a restart resumes)
        self.task: asyncio.Task[None] | None = None

    def publish(self, msg: Message | None) -> None:
        seq = msg.get("seq") if msg is not None else None
        if isinstance(seq, int):
            self.cursor = max(self.cursor or 0, seq)
        for q in self.queues:
            q.put_nowait(msg)


class Feeds:
    """The server's feeds, by run id."""

    def __init__(self, ui: Ui) -> None:
        self.ui = ui
        self._feeds: dict[str, Feed] = {}
        self.following = 0  # follows running now (at most one per run)

    def subscribe(self, run_id: str) -> tuple[Feed, asyncio.Queue[Message | None]]:
        feed = self._feeds.get(run_id)
        if feed is None:
            feed = self._feeds[run_id] = Feed(run_id)
            # where its follow starts, taken before this viewer reads what is kept: taken once
            # the follow runs, what the run's owner kept in between would reach no viewer
            feed.cursor = LogCache(run_id).last_seq()
        queue: asyncio.Queue[Message | None] = asyncio.Queue()
        feed.queues.add(queue)
        if feed.task is None or feed.task.done():
            self._start(feed)
        return feed, queue

    def unsubscribe(self, feed: Feed, queue: asyncio.Queue[Message | None]) -> None:
        feed.queues.discard(queue)
        if not feed.queues:
            if feed.task is not None:
                feed.task.cancel()  # nobody watches: stop pulling
            if self._feeds.get(feed.run_id) is feed:
                del self._feeds[feed.run_id]

    @contextlib.asynccontextmanager
    async def paused(self, run_id: str) -> AsyncIterator[None]:
        """No follow of this run while the body pulls it (a stop); its viewers stay."""
        feed = self._feeds.get(run_id)
        if feed is None or feed.task is None or feed.task.done():
            yield
            return
        feed.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feed.task
        try:
            yield
        finally:
            if self._feeds.get(run_id) is feed and feed.queues:
                self._start(feed)

    def _start(self, feed: Feed) -> None:
        feed.task = asyncio.create_task(self._follow(feed))

    async def _follow(self, feed: Feed) -> None:
        self.following += 1
        try:
            await self._follow_once(feed)
        finally:
            self.following -= 1

    async def _follow_once(self, feed: Feed) -> None:
        ui = self.ui
        try:
            run = await placed_or_ended(ui, feed.run_id)
            if feed.cursor is None:  # viewers read what is kept already themselves
                feed.cursor = LogCache(run.id).last_seq()

            def on_event(e: KeptEvent) -> None:
                msg = event_message(e)
                if msg is not None:
                    feed.publish(msg)

            async with ui.control() as ctl:
                final = await follow(
                    ctl,
                    run,
                    on_event,
                    lambda why: feed.publish({"reconnecting": why}),
                    feed.cursor,
                )
            feed.publish({"end": final.state.value, "exit_code": final.exit_code})
        except asyncio.CancelledError:
            raise  # paused, or nobody watches: the viewers (if any) stay subscribed
        except TclError as e:
            feed.publish({"error": str(e).splitlines()[0] if str(e) else type(e).__name__})
        except Exception as e:  # a bug: the viewer sees one line, the server's log the rest
            log.exception("following %s failed", feed.run_id)
            feed.publish({"error": f"{type(e).__name__}: {e}"})
        if self._feeds.get(feed.run_id) is feed:
            del self._feeds[feed.run_id]  # ended: the next viewer starts afresh
        feed.publish(None)

    async def aclose(self) -> None:
        tasks = [f.task for f in self._feeds.values() if f.task is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._feeds.clear()
