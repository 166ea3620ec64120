"""Free loopback ports for runners that share the host network.

The kernel picks a port free right now; the runner binds it a moment later, in another process.
Two tasks started at once could be handed the same port in between (the first runner has not
bound it yet when the second asks): the second runner fails to bind and the first one answers
at the port the second task was told. So a port handed out is not handed out again by this
shim for a while, whatever the kernel says.
"""

from __future__ import annotations

import socket
import threading
import time

HELD_S = 120.0  # long enough for any runner to bind its port
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
