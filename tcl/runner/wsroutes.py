"""The runner's WebSocket routes (behind the same bearer token as the rest of its API).

``WS /api/logs?after=SEQ``: every event past ``after`` as one JSON text message each, as they
happen; closed with 1000 once the job has ended and all were sent.

``WS /api/forward``: a byte stream to the job's interactive session (``tcl repl``'s Jupyter,
``@tcl.remote``'s call server), which listens on the job's loopback only. Each WebSocket is
one TCP connection to the session's port, binary messages both ways; the workstation's
``tcl.control.transport.portforward`` turns a local port into such WebSockets, one per
connection (so a browser's many connections, and a reconnect after a dropped tunnel, each get
their own). Only the session's own port can be reached: this is not a general-purpose proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from pydantic import ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from tcl.aiotasks import until_first
from tcl.runner.api import LogsQuery, RunnerState
from tcl.runner.service import Runner

WS_IDLE_WAIT_S = 30.0
FORWARD_CHUNK_BYTES = 256 * 1024
# Close codes (RFC 6455 leaves 4000-4999 to applications).
CLOSE_NO_SESSION = 4404  # not an interactive job, or it has not started
CLOSE_SESSION_DOWN = 4502  # the session's port refused the connection

Endpoint = Callable[[WebSocket], Awaitable[None]]


def logs_endpoint(runner: Runner | None) -> Endpoint:
    async def logs(ws: WebSocket) -> None:
        assert runner is not None
        try:
            q = LogsQuery.model_validate_strings(dict(ws.query_params))
        except ValidationError:
            await ws.close(1008)  # policy violation: a bad query
            return
        await ws.accept()
        sender = asyncio.create_task(_push(ws, runner, q.after))
        try:
            receiver = asyncio.create_task(_until_disconnect(ws))
            done, _ = await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
            if sender in done:
                receiver.cancel()
                if sender.exception() is None:
                    await ws.close(1000)
            else:
                sender.cancel()
        except WebSocketDisconnect:
            sender.cancel()
        finally:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender

    return logs


async def _until_disconnect(ws: WebSocket) -> None:
    """Returns when the client goes away; whatever it sends meanwhile is ignored."""
    while (await ws.receive())["type"] != "websocket.disconnect":
        pass


async def _push(ws: WebSocket, runner: Runner, after: int) -> None:
    """Send every event past ``after`` as a text message; return once the log is finished."""
    log = runner.log
    cursor = after
    while True:
        page = log.read_raw(cursor)
        for line in page.lines:
            await ws.send_text(line.decode())
        cursor = page.next
        if page.more:
            continue
        if log.finished and cursor >= log.last_seq:
            return
        await log.wait(cursor, WS_IDLE_WAIT_S)


def forward_endpoint(runner: Runner | None) -> Endpoint:
    async def forward(ws: WebSocket) -> None:
        assert runner is not None
        session = runner.session
        if session is None or runner.state is not RunnerState.RUNNING:
            await ws.close(CLOSE_NO_SESSION)
            return
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", session.port)
        except OSError:
            await ws.close(CLOSE_SESSION_DOWN)
            return
        await ws.accept()
        try:
            await _pump(ws, reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    return forward


async def _pump(ws: WebSocket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Bytes both ways until either side closes; the other side is then closed too."""

    async def upstream() -> None:  # WebSocket -> session
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes")
            if data is None and message.get("text") is not None:
                data = str(message["text"]).encode()
            if data:
                writer.write(data)
                await writer.drain()

    async def downstream() -> None:  # session -> WebSocket
        while data := await reader.read(FORWARD_CHUNK_BYTES):
            await ws.send_bytes(data)

    await until_first(upstream(), downstream())
    with contextlib.suppress(Exception):  # the session closed: say so to the client
        await ws.close(1000)
