"""A local port whose every connection reaches a run's interactive session (``tcl repl``).

Each accepted TCP connection gets a stream of its own through the runner's ``WS
/api/forward`` (over the same SSH tunnel as the run's logs), so a browser's many connections
are independent, and one that breaks (the SSH connection dropped) breaks alone: the next
connection re-resolves the runner, reconnecting the tunnel first. Opening a stream is retried
with backoff for ``reconnect_s`` before the local connection is given up.

Binds 127.0.0.1 only: the session's own key (Jupyter's token) still guards it, but nothing
beyond this machine should even see the port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from tcl.aiotasks import until_first
from tcl.control.backoff import backoff_s
from tcl.control.errors import AgentUnreachableError, SshError, TclError
from tcl.control.transport.agents import ForwardStream

log = logging.getLogger(__name__)

OpenStream = Callable[[], Awaitable[ForwardStream]]
Reset = Callable[[], Awaitable[None]]
CHUNK_BYTES = 256 * 1024


class PortForward:
    def __init__(
        self,
        open_stream: OpenStream,
        reset: Reset | None = None,
        *,
        on_close: Reset | None = None,
        port: int = 0,
        reconnect_s: float = 60.0,
        on_reconnect: Callable[[str], None] | None = None,
    ) -> None:
        self._open_stream = open_stream
        self._reset = reset
        self._port = port
        self.reconnect_s = reconnect_s
        self._on_reconnect = on_reconnect
        self._on_close = on_close
        self._server: asyncio.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self.connections = 0  # accepted so far (tests, `tcl repl` status)
        self.reconnects = 0  # streams that needed the tunnel re-resolved first

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> int:
        try:
            self._server = await asyncio.start_server(self._accept, "127.0.0.1", self._port)
        except OSError as e:
            raise TclError(f"cannot listen on 127.0.0.1:{self._port}: {e.strerror}") from None
        return self.port

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._conns):
            t.cancel()
        for t in list(self._conns):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None
        if self._on_close is not None:
            await self._on_close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        try:
            stream = await self._open()
            if stream is None:
                return
            try:
                await _pump(reader, writer, stream)
            finally:
                await stream.aclose()
        except asyncio.CancelledError:
            # aclose(): this task is the top of the connection, started by asyncio's server,
            # which reads its outcome; a cancelled one would be logged as an error there.
            return
        finally:
            self._conns.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _open(self) -> ForwardStream | None:
        """A stream to the session; after a failure the tunnel is reset and it is tried again,
        with backoff, for ``reconnect_s``. None: gave up (logged; the local connection closes)."""
        deadline = time.monotonic() + self.reconnect_s
        attempt = 0
        while True:
            try:
                stream = await self._open_stream()
                if attempt:
                    self.reconnects += 1
                    if self._on_reconnect is not None:
                        self._on_reconnect("reconnected")
                return stream
            except (AgentUnreachableError, SshError) as e:
                if time.monotonic() > deadline:
                    log.warning("forward: giving up on a connection: %s", e)
                    return None
                if attempt == 0 and self._on_reconnect is not None:
                    self._on_reconnect(f"connection lost ({e}); reconnecting")
                if self._reset is not None:
                    with contextlib.suppress(Exception):
                        await self._reset()
                await asyncio.sleep(min(backoff_s(attempt), 5.0))
                attempt += 1
            except TclError as e:  # the runner refused: the job ended, or is no session
                log.warning("forward: %s", e)
                return None


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, stream: ForwardStream
) -> None:
    async def upstream() -> None:  # local client -> session
        while data := await reader.read(CHUNK_BYTES):
            await stream.send(data)

    async def downstream() -> None:  # session -> local client
        while data := await stream.recv():
            writer.write(data)
            await writer.drain()

    await until_first(upstream(), downstream())
