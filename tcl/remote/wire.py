"""Length-prefixed frames between the workstation (client) and the remote worker, and the
typed handshake messages they carry.

A frame is a 1-byte type, an 8-byte big-endian body length and the body. Control frames carry
JSON (the dataclasses below, never a hand-written dict); CALL/RESULT (and the exception in
ERROR) carry the user's cloudpickle payload.

The handshake proves, on each connection, that both ends hold the session key without ever
sending it, so a captured handshake replays nowhere:

    client -> worker  HELLO      Hello: a fresh client nonce, its versions
    worker -> client  CHALLENGE  Challenge: a fresh worker nonce, the worker's proof, versions
                      (or REFUSED "version")
    client -> worker  PROOF      Proof: the client's proof, with the CALL in the same write
    worker -> client  REFUSED "token", or the call's OUT/RESULT/ERROR frames

A proof is HMAC-SHA256(key, [protocol, role, worker nonce, client nonce]): the role keeps one
side's proof from passing as the other's, the worker's nonce makes each connection's client
proof new, and the client's nonce makes the worker prove itself before the client sends the
call or unpickles anything. The worker unpickles nothing before the client's proof checked out.
Stdlib only: the worker imports this in the user's environment."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import hmac
import json
import platform
import secrets
import socket
import struct
import threading
import typing
from typing import Any, ClassVar, Protocol, TypeVar

from tcl.remote.errors import ProtocolError

HELLO = b"H"  # client -> worker: Hello
CHALLENGE = b"N"  # worker -> client: Challenge
PROOF = b"P"  # client -> worker: Proof
REFUSED = b"X"  # worker -> client: Refused
CALL = b"C"  # client -> worker: payload
OUT = b"O"  # worker -> client: {"stream": "stdout"|"stderr", "text"}
RESULT = b"R"  # worker -> client: payload
ERROR = b"E"  # worker -> client: see pack_error
INTERRUPT = b"I"  # client -> worker: empty

_HEADER = struct.Struct(">cQ")
# Before authentication a peer may only send small handshake frames: nothing big is buffered
# for a stranger.
MAX_CONTROL_FRAME = 4 * 1024

PROTOCOL = "tcl.remote/2"
WORKER = "worker"  # the role of a proof
CLIENT = "client"
NONCE_BYTES = 32


@dataclasses.dataclass(frozen=True)
class Hello:
    """The client's first frame."""

    KIND: ClassVar[bytes] = HELLO
    nonce: str
    python: str
    cloudpickle: str


@dataclasses.dataclass(frozen=True)
class Challenge:
    """The worker's answer to HELLO: its nonce for this connection and its proof."""

    KIND: ClassVar[bytes] = CHALLENGE
    nonce: str
    proof: str
    python: str
    cloudpickle: str
    pid: int


@dataclasses.dataclass(frozen=True)
class Proof:
    """The client's proof; its CALL follows."""

    KIND: ClassVar[bytes] = PROOF
    proof: str


@dataclasses.dataclass(frozen=True)
class Refused:
    """Why the worker hangs up: "token" (a wrong proof), "version", "deadline" (the handshake
    took too long) or "protocol" (a malformed frame)."""

    KIND: ClassVar[bytes] = REFUSED
    reason: str
    message: str


class Message(Protocol):
    KIND: ClassVar[bytes]


M = TypeVar("M", bound=Message)


def encode(msg: Message) -> bytes:
    """A handshake message's frame body."""
    assert dataclasses.is_dataclass(msg) and not isinstance(msg, type)
    return json.dumps(dataclasses.asdict(msg)).encode()


def decode(cls: type[M], kind: bytes, body: bytes) -> M:
    """The `cls` message in a received frame; ProtocolError if it is another frame or its
    fields are missing or of the wrong type."""
    if kind != cls.KIND:
        raise ProtocolError(f"expected frame {cls.KIND!r} ({cls.__name__}), got {kind!r}")
    obj = parse_json(body)
    values: dict[str, Any] = {}
    for name, want in _fields(cls):
        v = obj.get(name)
        if not isinstance(v, want) or isinstance(v, bool):
            raise ProtocolError(f"malformed {cls.__name__}: {name} is not a {want.__name__}")
        values[name] = v
    return cls(**values)


@functools.cache
def _fields(cls: type[Message]) -> tuple[tuple[str, type], ...]:
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))  # type: ignore[arg-type]


def frame(msg: Message) -> bytes:
    """A whole frame carrying `msg`, for transports other than a Channel (a WebSocket)."""
    body = encode(msg)
    return _HEADER.pack(msg.KIND, len(body)) + body


def take_frame(buf: bytearray, max_len: int | None = None) -> tuple[bytes, bytes] | None:
    """Remove and return the first whole frame (type, body) of `buf`, or None while it is
    incomplete; ProtocolError as soon as its header announces more than `max_len`."""
    if len(buf) < _HEADER.size:
        return None
    kind, n = _HEADER.unpack_from(buf)
    if max_len is not None and n > max_len:
        raise ProtocolError(f"frame of {n} bytes exceeds the limit of {max_len}")
    end = _HEADER.size + n
    if len(buf) < end:
        return None
    body = bytes(buf[_HEADER.size : end])
    del buf[:end]
    return kind, body


def new_nonce() -> str:
    return secrets.token_hex(NONCE_BYTES)


def nonce_ok(nonce: str) -> bool:
    return len(nonce) == 2 * NONCE_BYTES and all(c in "0123456789abcdef" for c in nonce)


def proof(key: str, role: str, worker_nonce: str, client_nonce: str) -> str:
    """HMAC-SHA256 of the session key over this connection's context (see the module doc)."""
    context = json.dumps([PROTOCOL, role, worker_nonce, client_nonce]).encode()
    return hmac.new(key.encode(), context, hashlib.sha256).hexdigest()


def proof_ok(given: str, key: str, role: str, worker_nonce: str, client_nonce: str) -> bool:
    expected = proof(key, role, worker_nonce, client_nonce)
    return hmac.compare_digest(given.encode(), expected.encode())


class ConnectionClosed(ProtocolError):
    """The peer closed the connection."""


class Channel:
    """A socket speaking frames. Sends are serialized by a lock (the worker's output flusher and
    its main thread both send). Received bytes stay in `_buf` until a whole frame is there, so a
    KeyboardInterrupt inside `recv` loses nothing and the stream stays in step."""

    def __init__(self, sock: socket.socket, received: bytes = b"") -> None:
        self.sock = sock
        self._send_lock = threading.Lock()
        self._buf = bytearray(received)  # bytes already read past the handshake
        self.bytes_sent = 0
        self.bytes_received = 0

    def send(self, kind: bytes, body: bytes = b"", *, after: Message | None = None) -> None:
        """Send one frame; `after`, a handshake message, goes first in the same write (two
        small writes in a row would wait for the peer's delayed ACK: Nagle's algorithm)."""
        header = _HEADER.pack(kind, len(body))
        if after is not None:
            header = frame(after) + header
        with self._send_lock:
            # Small frames in one write; big payloads are not copied just to prepend 9 bytes.
            if len(body) < 65536:
                self.sock.sendall(header + body)
            else:
                self.sock.sendall(header)
                self.sock.sendall(body)
            self.bytes_sent += len(header) + len(body)

    def send_json(self, kind: bytes, obj: dict[str, Any]) -> None:
        self.send(kind, json.dumps(obj).encode())

    def send_msg(self, msg: Message) -> None:
        self.send(msg.KIND, encode(msg))

    def recv(self, max_len: int | None = None) -> tuple[bytes, bytes]:
        """The next (type, body); raises ConnectionClosed at EOF."""
        buf = self._buf
        while True:
            got = take_frame(buf, max_len)
            if got is not None:
                self.bytes_received += _HEADER.size + len(got[1])
                return got
            want = _HEADER.size - len(buf)
            if want <= 0:
                want = _HEADER.size + _HEADER.unpack_from(buf)[1] - len(buf)
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
