"""``WS /api/runs/{id}/logs?after=N``: a run's log and state events as ``tcl logs -f`` shows
them, first those kept locally, then live (:func:`tcl.control.follow.follow`), then one
``{"end": state}`` message and the socket is closed.

Each viewer has its own follow; a viewer that goes away cancels it. Metric events are left out
(the page reads them from ``/metrics``). Messages::

    {"seq", "ts", "kind": "log"|"state", "node", "nodes", "stream", "data", "state", "exit_code"}
    {"reconnecting": why}            the host's connection dropped; it is being tried again
    {"error": why}                   following failed (the socket is closed after it)
    {"end": state, "exit_code": n}   the run ended; the last message
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from tcl.control.errors import RunNotFoundError, TclError
from tcl.control.follow import follow
from tcl.control.logcache import KeptEvent
from tcl.runner.api import EventKind
from tcl.ui.context import Ui, ui_of

if TYPE_CHECKING:
    from tcl.control.store import Run

router = APIRouter()
log = logging.getLogger("tcl.ui")
Message = dict[str, Any]
PLACEMENT_POLL_S = 1.0


def event_message(e: KeptEvent) -> Message | None:
    """The wire form of a kept event; None for those the log view does not show (metrics)."""
    if e.kind is EventKind.METRIC:
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
    """The run once it has a placed attempt (a handle) or has ended. :func:`follow` pulls
    without waiting while a run has no handle yet (pending): on this shared event loop that
    would starve every other request, so the wait for a placement happens here."""
    while True:
        run = ui.store.get_run(run_id)
        att = ui.store.latest_attempt(run_id)
        if run.state.is_final or (att is not None and att.handle):
            return run
        await asyncio.sleep(PLACEMENT_POLL_S)


async def _until_gone(ws: WebSocket) -> None:
    """Returns when the viewer disconnects (what it sends is ignored)."""
    with contextlib.suppress(WebSocketDisconnect):
        while True:
            msg = await ws.receive()
            if msg["type"] == "websocket.disconnect":
                return


@router.websocket("/api/runs/{run_id}/logs")
async def run_logs(ws: WebSocket, run_id: str, after: int = 0) -> None:
    ui = ui_of(ws)
    try:
        ui.store.get_run(run_id)
    except RunNotFoundError:
        await ws.close(code=4404, reason=f"no run {run_id!r}"[:120])
        return
    await ws.accept()
    queue: asyncio.Queue[Message | None] = asyncio.Queue()

    def on_event(e: KeptEvent) -> None:
        msg = event_message(e)
        if msg is not None:
            queue.put_nowait(msg)

    async def work() -> None:
        try:
            run = await placed_or_ended(ui, run_id)
            async with ui.control() as ctl:
                final = await follow(
                    ctl,
                    run,
                    on_event,
                    lambda why: queue.put_nowait({"reconnecting": why}),
                    max(0, after),
                )
            queue.put_nowait({"end": final.state.value, "exit_code": final.exit_code})
        except TclError as e:
            queue.put_nowait({"error": str(e).splitlines()[0] if str(e) else type(e).__name__})
        except Exception as e:  # a bug: the viewer sees one line, the server's log the rest
            log.exception("following %s failed", run_id)
            queue.put_nowait({"error": f"{type(e).__name__}: {e}"})
        finally:
            queue.put_nowait(None)

    follower = asyncio.create_task(work())
    listener = asyncio.create_task(_until_gone(ws))
    ui.viewers += 1
    try:
        while True:
            getter = asyncio.create_task(queue.get())
            done, _ = await asyncio.wait({getter, listener}, return_when=asyncio.FIRST_COMPLETED)
            if getter not in done:
                getter.cancel()
                return  # the viewer went away: its follow is cancelled below
            msg = getter.result()
            if msg is None:
                break
            await ws.send_json(msg)
        await ws.close()
    except (WebSocketDisconnect, RuntimeError):
        return  # sending to a socket the viewer closed
    finally:
        ui.viewers -= 1
        for t in (follower, listener):
            t.cancel()
        await asyncio.gather(follower, listener, return_exceptions=True)
