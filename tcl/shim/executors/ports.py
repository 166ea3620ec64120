"""Free loopback ports for runners that share the host network.

The kernel picks a port free right now; the runner binds it a moment later, in another process.
Two tasks started at once could be handed the same port in between (the first runner has not
bound it yet when the second asks): the second runner fails to bind and the first one answers
at the port the second task was told. So a port handed out is not handed out again by this
shim for a while, whatever the kernel says.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time

import psutil

HELD_S = 120.0  # long enough for any runner to bind its port
LISTEN_POLL_S = 0.002  # a local connect refused costs microseconds
_handed: dict[int, float] = {}  # port -> when it was handed out
_lock = threading.Lock()


def free_port() -> int:
    """An ephemeral port free right now on 127.0.0.1 and not handed out lately."""
    with _lock:
        now = time.monotonic()
        for old, at in list(_handed.items()):
            if now - at > HELD_S:
                del _handed[old]
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                offered: int = s.getsockname()[1]
            if offered not in _handed:
                _handed[offered] = now
                return offered


async def listening(port: int, pid: int, timeout_s: float) -> bool:
    """Wait until something listens on 127.0.0.1:``port`` (the runner ``pid`` bound it), at
    most ``timeout_s``, or until ``pid`` is gone; whether it listens. A task reported running
    once its runner listens is asked at once: a connection made before the runner serves waits
    in its backlog, where one made before it bound was refused and asked again 20 ms later (a
    forked runner binds a few ms after the fork: 41 % of a sweep's first asks were refused)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if time.monotonic() > deadline or not psutil.pid_exists(pid):
                return False
            await asyncio.sleep(LISTEN_POLL_S)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True
