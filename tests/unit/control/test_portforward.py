"""The local port forward against an in-memory session stream (real sockets on loopback): bytes
both ways, a stream that cannot be opened is re-resolved after a reset, a refusal closes only
that connection."""

from __future__ import annotations

import asyncio

from tcl.control.errors import AgentError, AgentUnreachableError
from tcl.control.transport.portforward import PortForward


class EchoStream:
    """A session that answers every chunk upper-cased."""

    def __init__(self) -> None:
        self.inbox: asyncio.Queue[bytes] = asyncio.Queue()
        self.closed = False

    async def send(self, data: bytes) -> None:
        await self.inbox.put(data.upper())

    async def recv(self) -> bytes:
        return await self.inbox.get()

    async def aclose(self) -> None:
        self.closed = True


class Opener:
    def __init__(self, failures: int = 0, refuse: bool = False) -> None:
        self.failures = failures
        self.refuse = refuse
        self.opened: list[EchoStream] = []
        self.resets = 0

    async def open(self) -> EchoStream:
        if self.refuse:
            raise AgentError("runner answered 403: the job is not a session")
        if self.failures:
            self.failures -= 1
            raise AgentUnreachableError("ssh box: connection lost")
        self.opened.append(EchoStream())
        return self.opened[-1]

    async def reset(self) -> None:
        self.resets += 1


async def _exchange(port: int, data: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(100), 10)
    except ConnectionResetError:  # closed with our bytes unread: nothing came back
        return b""
    finally:
        writer.close()


async def test_bytes_cross_both_ways_and_a_lost_tunnel_is_reset_and_retried() -> None:
    opener = Opener(failures=2)
    said: list[str] = []
    fwd = PortForward(opener.open, opener.reset, on_reconnect=said.append)
    port = await fwd.start()
    try:
        assert await _exchange(port, b"hello") == b"HELLO"
        assert opener.resets == 2 and fwd.reconnects == 1
        assert said[0].startswith("connection lost") and said[-1] == "reconnected"
        assert await _exchange(port, b"again") == b"AGAIN"  # a second connection, its own stream
        assert len(opener.opened) == 2 and fwd.connections == 2
    finally:
        await fwd.aclose()
    assert all(s.closed for s in opener.opened)


async def test_a_refused_stream_closes_only_that_connection() -> None:
    opener = Opener(refuse=True)
    fwd = PortForward(opener.open, opener.reset)
    port = await fwd.start()
    try:
        assert await _exchange(port, b"x") == b""  # closed, nothing sent back
        assert opener.resets == 0  # a refusal is not a lost tunnel
        opener.refuse = False
        assert await _exchange(port, b"ok") == b"OK"
    finally:
        await fwd.aclose()


async def test_a_tunnel_that_stays_down_is_given_up() -> None:
    opener = Opener(failures=10_000)
    fwd = PortForward(opener.open, opener.reset, reconnect_s=0.5)
    port = await fwd.start()
    try:
        assert await _exchange(port, b"x") == b""
        assert opener.resets >= 1
    finally:
        await fwd.aclose()
