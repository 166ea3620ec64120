"""HTTP over a local agent's Unix socket (``tcl serve``, the local shim), its listener checked to
run as this user first (``tcl.localsock``). Standard library only."""

from __future__ import annotations

import http.client
from typing import TYPE_CHECKING

from tcl.localsock import connect_checked

if TYPE_CHECKING:
    from pathlib import Path


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a local agent's Unix socket, to a listener checked to run as this user (else
    ``PeerError`` before the request is sent); ``peer_pid``: the listener's, as the kernel said."""

    def __init__(self, path: Path, what: str, timeout_s: float | None) -> None:
        super().__init__("localhost", timeout=timeout_s)
        self._path = path
        self._what = what
        self.peer_pid = 0

    def connect(self) -> None:
        self.sock, peer = connect_checked(self._path, self._what, self.timeout)
        self.peer_pid = peer.pid
