"""Length-prefixed frames between the workstation (client) and the remote worker.

A frame is a 1-byte type, an 8-byte big-endian body length and the body. Control frames carry
JSON; CALL/RESULT (and the exception in ERROR) carry the user's cloudpickle payload, which the
worker only unpickles after the HELLO token checked out. Stdlib only: the worker imports this in
the user's environment."""

from __future__ import annotations

import contextlib
import hmac
import json
import platform
import socket
import struct
import threading
from typing import Any

from tcl.remote.errors import ProtocolError

HELLO = b"H"  # client -> worker: {"token", "python", "cloudpickle"}
WELCOME = b"W"  # worker -> client: {"python", "cloudpickle", "pid"}
REFUSED = b"X"  # worker -> client: {"reason": "token"|"version", "message"}
CALL = b"C"  # client -> worker: payload
OUT = b"O"  # worker -> client: {"stream": "stdout"|"stderr", "text"}
RESULT = b"R"  # worker -> client: payload
ERROR = b"E"  # worker -> client: see pack_error
INTERRUPT = b"I"  # client -> worker: empty

_HEADER = struct.Struct(">cQ")
# Before authentication a peer may only send a small HELLO: nothing big is buffered for a
# stranger.
MAX_CONTROL_FRAME = 64 * 1024


class ConnectionClosed(ProtocolError):
    """The peer closed the connection."""


class Channel:
    """A socket speaking frames. Sends are serialized by a lock (the worker's output flusher and
    its main thread both send). Received bytes stay in `_buf` until a whole frame is there, so a
    KeyboardInterrupt inside `recv` loses nothing and the stream stays in step."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._send_lock = threading.Lock()
        self._buf = bytearray()
        self.bytes_sent = 0
        self.bytes_received = 0

    def send(self, kind: bytes, body: bytes = b"") -> None:
        header = _HEADER.pack(kind, len(body))
        with self._send_lock:
            # Small frames in one write; big payloads are not copied just to prepend 9 bytes.
            if len(body) < 65536:
                self.sock.sendall(header + body)
            else:
                self.sock.sendall(header)
                self.sock.sendall(body)
            self.bytes_sent += _HEADER.size + len(body)

    def send_json(self, kind: bytes, obj: dict[str, Any]) -> None:
        self.send(kind, json.dumps(obj).encode())

    def recv(self, max_len: int | None = None) -> tuple[bytes, bytes]:
        """The next (type, body); raises ConnectionClosed at EOF."""
        buf = self._buf
        while True:
            if len(buf) >= _HEADER.size:
                kind, n = _HEADER.unpack_from(buf)
                if max_len is not None and n > max_len:
                    raise ProtocolError(f"frame of {n} bytes exceeds the limit of {max_len}")
                end = _HEADER.size + n
                if len(buf) >= end:
                    body = bytes(buf[_HEADER.size : end])
                    del buf[:end]
                    self.bytes_received += end
                    return kind, body
                want = end - len(buf)
            else:
                want = _HEADER.size - len(buf)
            chunk = self.sock.recv(min(max(want, 65536), 4 << 20))
            if not chunk:
                raise ConnectionClosed("the connection was closed")
            buf += chunk

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(body)
    except ValueError as e:
        raise ProtocolError(f"malformed control frame: {e}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("malformed control frame: not an object")
    return obj


def local_versions() -> dict[str, str]:
    """This interpreter's versions that must match across the wire (cloudpickle's README: only
    between identical Python versions)."""
    import cloudpickle

    return {"python": platform.python_version(), "cloudpickle": str(cloudpickle.__version__)}


def version_problem(remote: dict[str, Any], local: dict[str, str]) -> str | None:
    """Why pickles cannot travel between the two sides, or None when they can."""
    rpy, lpy = str(remote.get("python", "?")), local["python"]
    if rpy.split(".")[:2] != lpy.split(".")[:2]:
        return (
            f"the remote Python is {rpy}, this one {lpy}: pickled functions only work between "
            "the same Python major.minor; build the remote environment from the same lockfile"
        )
    rcp, lcp = str(remote.get("cloudpickle", "?")), local["cloudpickle"]
    if rcp != lcp:
        return (
            f"the remote cloudpickle is {rcp}, this one {lcp}: both sides must use the same "
            "cloudpickle version"
        )
    return None


def token_ok(given: object, expected: str) -> bool:
    return isinstance(given, str) and hmac.compare_digest(given.encode(), expected.encode())


_ERR_HEAD = struct.Struct(">Q")


def pack_error(info: dict[str, Any], exc_payload: bytes) -> bytes:
    """ERROR body: 8-byte length of a JSON header {"type", "message", "traceback"}, the header,
    then the cloudpickled exception (empty when it could not be pickled)."""
    head = json.dumps(info).encode()
    return _ERR_HEAD.pack(len(head)) + head + exc_payload


def unpack_error(body: bytes) -> tuple[dict[str, Any], bytes]:
    if len(body) < _ERR_HEAD.size:
        raise ProtocolError("malformed ERROR frame")
    (n,) = _ERR_HEAD.unpack_from(body)
    head = parse_json(body[_ERR_HEAD.size : _ERR_HEAD.size + n])
    return head, body[_ERR_HEAD.size + n :]
