"""The call server's front door against a local user on the job's host: the session key never
crosses the wire (a process squatting the port learns nothing). Strangers against a real worker
are tests/integration/remote/test_handshake.py."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from tcl.remote import errors, wire
from tcl.remote.call import exchange
from tcl.remote.capture import prepare
from tests.unit.remote.conftest import notebook


def test_the_session_key_never_crosses_the_wire() -> None:
    """A process squatting the port (the worker died, or never bound it) gets no key and no
    call: the client asks the other end to prove it holds the key before sending anything."""
    secret = "the-session-key-" + "k" * 32
    srv = socket.create_server(("127.0.0.1", 0))
    heard: list[tuple[bytes, bytes]] = []

    def impostor() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.settimeout(10.0)
            chan = wire.Channel(conn)
            try:
                while True:
                    kind, body = chan.recv()
                    heard.append((kind, body))
                    if kind == wire.HELLO:
                        hello = wire.decode(wire.Hello, kind, body)
                        nonce = wire.new_nonce()
                        guess = wire.proof("a guessed key", wire.WORKER, nonce, hello.nonce)
                        chan.send_msg(
                            wire.Challenge(nonce=nonce, proof=guess, pid=1, **wire.local_versions())
                        )
            except (OSError, errors.RemoteError):
                pass

    thread = threading.Thread(target=impostor, daemon=True)
    thread.start()
    ns = notebook("def f():\n    return 1\n")
    conn = socket.create_connection(srv.getsockname())
    started = time.monotonic()
    with pytest.raises(errors.RemoteError) as refused:
        exchange(conn, prepare(ns["f"], (), {}), token=secret)
    thread.join(10)
    srv.close()
    assert time.monotonic() - started < 10  # refused at once, not by a timeout
    assert all(secret.encode() not in body for _, body in heard), heard
    assert wire.CALL not in [kind for kind, _ in heard]
    assert isinstance(refused.value, errors.WorkerUnverified), refused.value
