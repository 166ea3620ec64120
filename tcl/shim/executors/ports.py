"""Free loopback ports for runners that share the host network."""

from __future__ import annotations

import socket


def free_port() -> int:
    """An ephemeral port free right now on 127.0.0.1 (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port
