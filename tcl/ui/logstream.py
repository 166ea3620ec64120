"""``WS /api/runs/{id}/logs?after=N``: a run's log and state events as ``tcl logs -f`` shows
them, first those kept locally, then live (the run's shared :class:`~tcl.ui.feeds.Feed`), then
one ``{"end": state}`` message and the socket is closed.

Metric events are left out (the page reads them from ``/metrics``). A viewer that goes away
leaves its run's feed, which stops once nobody watches. Messages::

    {"seq", "ts", "kind": "log"|"state", "node", "nodes", "stream", "data", "state", "exit_code"}
    {"caught_up": seq}               what is kept was sent (up to seq); what follows is live
    {"reconnecting": why}            the host's connection dropped; it is being tried again
    {"error": why}                   following failed (the socket is closed after it)
    {"end": state, "exit_code": n}   the run ended; the last message
"""

from __future__ import annotations

import asyncio
import contextlib

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from tcl.control.errors import RunNotFoundError
from tcl.control.logcache import LogCache
from tcl.ui.context import ui_of
from tcl.ui.feeds import Message, event_message

router = APIRouter()


async def _until_gone(ws: WebSocket) -> None:
    """Returns when the viewer disconnects (what it sends is ignored)."""
    with contextlib.suppress(WebSocketDisconnect):
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                return


async def _next(queue: asyncio.Queue[Message | None], listener: asyncio.Task[None]) -> Message:
    """The feed's next message; raises ``WebSocketDisconnect`` once the viewer left, and
    returns ``{}`` when the feed ended."""
    getter = asyncio.create_task(queue.get())
    done, _ = await asyncio.wait({getter, listener}, return_when=asyncio.FIRST_COMPLETED)
    if getter not in done:
        getter.cancel()
        raise WebSocketDisconnect(1001)
    return getter.result() or {}


@router.websocket("/api/runs/{run_id}/logs")
async def run_logs(ws: WebSocket, run_id: str, after: int = 0) -> None:
    ui = ui_of(ws)
    try:
        ui.store.get_run(run_id)
    except RunNotFoundError:
        await ws.close(code=4404, reason=f"no run {run_id!r}"[:120])
        return
    await ws.accept()
    feed, queue = ui.feeds.subscribe(run_id)  # first: what is kept after this comes through it
    listener = asyncio.create_task(_until_gone(ws))
    ui.viewers += 1
    try:
        last = max(0, after)
        kept = list(LogCache(run_id).read(last))  # at once: the feed may append meanwhile
        for e in kept:
            last = e.seq
            msg = event_message(e)
            if msg is not None:
                await ws.send_json(msg)
        await ws.send_json({"caught_up": last})  # the page can tell "no output yet" now
        while msg := await _next(queue, listener):
            seq = msg.get("seq")
            if isinstance(seq, int):
                if seq <= last:
                    continue  # sent from the cache already
                last = seq
            await ws.send_json(msg)
        await ws.close()
    except (WebSocketDisconnect, RuntimeError):
        return  # the viewer went away (sending to a closed socket raises RuntimeError)
    finally:
        ui.viewers -= 1
        ui.feeds.unsubscribe(feed, queue)
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener
