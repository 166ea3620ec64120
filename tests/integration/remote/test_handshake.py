"""The call server's front door against a local user on the job's host, with a real worker
subprocess: strangers that trickle bytes or never speak hold nothing and are cut off, and a
captured handshake replays nowhere (the session key never crossing the wire is
tests/unit/remote/test_handshake.py)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tcl.remote import wire
from tcl.remote.call import exchange
from tcl.remote.capture import prepare
from tcl.remote.local import SubprocessSession
from tests.unit.remote.conftest import notebook

APPEND = """
def append(path):
    with open(path, "a") as f:
        f.write("ran\\n")
    return "done"
"""


@pytest.fixture
def fresh() -> Iterator[SubprocessSession]:
    """A worker of its own: a test that wedged it must not wedge the module's."""
    session = SubprocessSession()
    yield session
    session.close()


def _frame_bytes(kind: bytes, body: bytes) -> bytes:
    """The bytes of one frame as a Channel writes it."""
    a, b = socket.socketpair()
    with a, b:
        wire.Channel(a).send(kind, body)
        a.shutdown(socket.SHUT_WR)
        out = bytearray()
        while chunk := b.recv(65536):
            out += chunk
    return bytes(out)


def _trickle(sock: socket.socket, data: bytes, stop: threading.Event) -> None:
    """Send `data` one byte every 0.1 s until told to stop or the worker hangs up."""
    for byte in data:
        if stop.wait(0.1):
            return
        try:
            sock.sendall(bytes([byte]))
        except OSError:
            return


def test_twenty_slow_strangers_do_not_delay_a_call(fresh: SubprocessSession) -> None:
    hello = _frame_bytes(wire.HELLO, b" " * 2000)  # a HELLO that takes minutes to arrive
    stop = threading.Event()
    strangers = [socket.create_connection(("127.0.0.1", fresh.port)) for _ in range(20)]
    threads = [
        threading.Thread(target=_trickle, args=(s, hello, stop), daemon=True)
        for s in strangers[::2]  # the other half never say anything
    ]
    for t in threads:
        t.start()
    pool = ThreadPoolExecutor(1)
    try:
        ns = notebook("def f(x):\n    return x + 1\n")
        conn, token = fresh.connect()
        fut = pool.submit(exchange, conn, prepare(ns["f"], (41,), {}), token=token)
        assert fut.result(timeout=2.0) == 42  # the bound the issue asks for
    finally:
        stop.set()
        for s in strangers:
            s.close()
        pool.shutdown(wait=True)


def test_a_stranger_that_never_finishes_its_handshake_is_cut_off(
    fresh: SubprocessSession,
) -> None:
    hello = _frame_bytes(wire.HELLO, b" " * 2000)
    stop = threading.Event()
    sock = socket.create_connection(("127.0.0.1", fresh.port))
    threading.Thread(target=_trickle, args=(sock, hello, stop), daemon=True).start()
    sock.settimeout(20.0)  # generous: the handshake deadline is a few seconds
    chan = wire.Channel(sock)
    try:
        kinds = []
        with pytest.raises((wire.ConnectionClosed, ConnectionResetError)):
            while True:
                kinds.append(chan.recv()[0])
        assert kinds in ([], [wire.REFUSED])
    finally:
        stop.set()
        sock.close()


class _Tap:
    """A relay in front of the worker that records what the client sends: an eavesdropper on
    one legitimate connection."""

    def __init__(self, port: int) -> None:
        self.upstream_port = port
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.srv.getsockname()[1])
        self.sent = bytearray()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        client, _ = self.srv.accept()
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        back = threading.Thread(target=self._pump, args=(upstream, client, None), daemon=True)
        back.start()
        self._pump(client, upstream, self.sent)
        back.join(10)
        client.close()
        upstream.close()
        self.srv.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, record: bytearray | None) -> None:
        try:
            while chunk := src.recv(65536):
                if record is not None:
                    record += chunk
                dst.sendall(chunk)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _frames_until_the_end(sock: socket.socket) -> list[bytes]:
    """The kinds of the frames the worker sends until a verdict (RESULT, ERROR, REFUSED) or
    until it hangs up."""
    sock.settimeout(10.0)
    chan = wire.Channel(sock)
    kinds: list[bytes] = []
    try:
        while not kinds or kinds[-1] not in (wire.RESULT, wire.ERROR, wire.REFUSED):
            kinds.append(chan.recv()[0])
    except (wire.ConnectionClosed, ConnectionResetError):
        pass
    return kinds


def test_a_captured_handshake_replays_nowhere(fresh: SubprocessSession, tmp_path: Path) -> None:
    ran = tmp_path / "ran.txt"
    ns = notebook(APPEND)
    tap = _Tap(fresh.port)
    _, token = fresh.connect()
    conn = socket.create_connection(("127.0.0.1", tap.port))
    assert exchange(conn, prepare(ns["append"], (str(ran),), {}), token=token) == "done"
    tap.thread.join(10)
    assert ran.read_text() == "ran\n"

    # Replayed byte for byte on a new connection: refused, and the call does not run.
    replay = socket.create_connection(("127.0.0.1", fresh.port))
    with replay:
        replay.sendall(bytes(tap.sent))
        kinds = _frames_until_the_end(replay)
    assert kinds[-1:] == [wire.REFUSED], kinds
    assert wire.RESULT not in kinds
    assert ran.read_text() == "ran\n"
