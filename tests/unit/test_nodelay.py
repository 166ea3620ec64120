"""The agents that serve on a socket bound by tcl (the runner, the dashboard) answer without
Nagle's delay: their connections inherit TCP_NODELAY from the listening socket. Without it, a
reply written in two parts (its head, then its body) on a kept-alive connection waited for the
client's delayed ACK: ~40 ms a call, measured on every long-poll of a run's events
(``bench/follow_log.py``)."""

from __future__ import annotations

import socket
from collections.abc import Callable

import pytest

from tcl.runner.server import bind as runner_bind
from tcl.ui.server import bind as ui_bind


@pytest.mark.parametrize(
    "bind", [lambda: runner_bind("127.0.0.1", 0), lambda: ui_bind(0)], ids=["runner", "ui"]
)
def test_an_accepted_connection_sends_without_delay(bind: Callable[[], socket.socket]) -> None:
    listener = bind()
    with listener, socket.create_connection(listener.getsockname()[:2]) as client:
        conn, _ = listener.accept()
        with conn:
            assert conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            conn.sendall(b"x")
            assert client.recv(1) == b"x"
