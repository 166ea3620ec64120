"""The client side of one call over a connected socket: handshake, ship, stream the remote
output live, then write the changed globals back (or re-raise the remote exception)."""

from __future__ import annotations

import dataclasses
import hashlib
import socket
import sys
import threading
import time
import types
from dataclasses import dataclass, field
from typing import Any

from tcl.remote import payload, wire
from tcl.remote.capture import Shipment, prepare
from tcl.remote.errors import (
    BlobsMissing,
    ProtocolError,
    RemoteCallFailed,
    RemoteError,
    RemoteTraceback,
    VersionMismatch,
    WorkerRefused,
    WorkerUnverified,
)
from tcl.remote.outcome import Outcome
from tcl.remote.writeback import write_back

# After an INTERRUPT, how long to wait for the worker's KeyboardInterrupt before giving up.
INTERRUPT_GRACE_S = 10.0
# The handshake's own limit on this side (the worker gives it a few seconds from its accept;
# this also covers a tunnel that is slow to open). The call itself has none.
HANDSHAKE_TIMEOUT_S = 60.0


@dataclass
class CallStats:
    """What one call moved and changed. `bytes_received` counts every frame of the reply
    (output, result): a global the call did not change is not in it."""

    bytes_sent: int = 0
    bytes_received: int = 0
    seconds: float = 0.0
    changed: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)


_last = threading.local()
_last_any: list[CallStats] = [CallStats()]


def last_call_stats() -> CallStats:
    """Stats of the last call finished in this thread (or, if none, in any thread)."""
    stats: CallStats | None = getattr(_last, "stats", None)
    return stats if stats is not None else _last_any[0]


def _record(stats: CallStats) -> None:
    _last.stats = stats
    _last_any[0] = stats


def _handshake(chan: wire.Channel, token: str) -> wire.Proof:
    """Both ends prove they hold the key without sending it (see :mod:`tcl.remote.wire`); the
    worker proves it first, so nothing goes to, or is unpickled from, an impostor. Returns the
    client's proof, which goes with the CALL: the worker's verdict on it comes as the reply."""
    hello = wire.Hello(nonce=wire.new_nonce(), **wire.local_versions())
    chan.send_msg(hello)
    kind, body = chan.recv(max_len=wire.MAX_CONTROL_FRAME)
    if kind == wire.REFUSED:
        raise _refused(body)
    challenge = wire.decode(wire.Challenge, kind, body)
    if not wire.proof_ok(challenge.proof, token, wire.WORKER, challenge.nonce, hello.nonce):
        raise WorkerUnverified(
            "wrong session token, or not this session's worker: the other end could not prove "
            "it holds the session key (nothing was sent to it)"
        )
    problem = wire.version_problem(dataclasses.asdict(challenge), wire.local_versions())
    if problem is not None:
        raise VersionMismatch(problem)
    return wire.Proof(wire.proof(token, wire.CLIENT, challenge.nonce, hello.nonce))


def _refused(body: bytes) -> RemoteError:
    refused = wire.decode(wire.Refused, wire.REFUSED, body)
    if refused.reason == "version":
        return VersionMismatch(refused.message)
    return WorkerRefused(f"the remote worker refused the connection: {refused.message}")


def _show(body: bytes) -> None:
    # Looked up per frame: in a notebook, sys.stdout is the running cell's stream.
    msg = wire.parse_json(body)
    stream = sys.stderr if msg.get("stream") == "stderr" else sys.stdout
    stream.write(str(msg.get("text", "")))
    stream.flush()


def _remote_exception(body: bytes) -> BaseException:
    """The remote exception, the same type when it unpickles, with the remote traceback text
    as its `__cause__`."""
    info, exc_payload = wire.unpack_error(body)
    text = str(info.get("traceback", ""))
    exc: BaseException | None = None
    if exc_payload:
        try:
            loaded = payload.loads(exc_payload)
            exc = loaded if isinstance(loaded, BaseException) else None
        except Exception:
            exc = None
    if exc is None:
        exc = RemoteCallFailed(f"{info.get('type')}: {info.get('message')}")
    exc.__cause__ = RemoteTraceback(text)
    exc.__traceback__ = None
    return exc


def _wait_reply(chan: wire.Channel) -> tuple[bytes, bytes]:
    """The RESULT or ERROR frame, showing OUT frames as they come. A KeyboardInterrupt here
    asks the worker to interrupt the call and, once it confirms (or after a grace period),
    raises KeyboardInterrupt with the remote traceback of where the call stopped."""
    try:
        while True:
            kind, body = chan.recv()
            if kind == wire.OUT:
                _show(body)
            elif kind in (wire.RESULT, wire.ERROR):
                return kind, body
            elif kind == wire.REFUSED:
                raise _refused(body)
            else:
                raise ProtocolError(f"unexpected frame {kind!r} during a call")
    except KeyboardInterrupt:
        pass
    interrupted = KeyboardInterrupt()
    try:
        chan.send(wire.INTERRUPT)
        chan.sock.settimeout(INTERRUPT_GRACE_S)
        while True:
            kind, body = chan.recv()
            if kind == wire.OUT:
                _show(body)
            elif kind == wire.ERROR:
                interrupted.__cause__ = _remote_exception(body).__cause__
                break
            else:
                break
    except (OSError, ProtocolError):
        print("tcl.remote: the worker did not confirm the interrupt", file=sys.stderr)
    raise interrupted


# Per worker (its session's token, digested): the arrays it was sent (``payload.dumps_call``).
_sent: dict[bytes, set[bytes]] = {}
_sent_lock = threading.Lock()


def _sent_arrays(token: str) -> set[bytes]:
    with _sent_lock:
        return _sent.setdefault(hashlib.sha256(token.encode()).digest(), set())


def _lacks_arrays(body: bytes) -> bool:
    info, _ = wire.unpack_error(body)
    return info.get("type") == BlobsMissing.__qualname__


def exchange(conn: socket.socket, shipment: Shipment, *, token: str) -> Any:
    """Run a prepared call over `conn` (closed afterwards) and return its value."""
    stats = CallStats()
    started = time.monotonic()
    chan = wire.Channel(conn)
    try:
        conn.settimeout(HANDSHAKE_TIMEOUT_S)
        proof = _handshake(chan, token)
        conn.settimeout(None)  # a call may print nothing for hours
        sent = _sent_arrays(token)
        with _sent_lock:
            lacking = {d: a for d, a in shipment.blobs.items() if d not in sent}
        request = payload.dumps((lacking, shipment.body))
        chan.send(wire.CALL, request, after=proof)
        stats.bytes_sent = len(request)
        received_before = chan.bytes_received
        kind, body = _wait_reply(chan)
        if kind == wire.ERROR and _lacks_arrays(body):
            # the worker dropped an array it was sent (its cache is bounded): all of them again
            request = payload.dumps((shipment.blobs, shipment.body))
            chan.send(wire.CALL, request)
            stats.bytes_sent += len(request)
            kind, body = _wait_reply(chan)
        if kind == wire.RESULT:
            with _sent_lock:
                sent.update(shipment.blobs)
        stats.bytes_received = chan.bytes_received - received_before
    finally:
        chan.close()
        stats.seconds = time.monotonic() - started
        _record(stats)
    if kind == wire.ERROR:
        raise _remote_exception(body)
    done = payload.loads(body)
    if not isinstance(done, Outcome):
        raise ProtocolError(f"the worker's reply is a {type(done).__name__}, not an Outcome")
    return write_back(shipment, done, stats)


def call(
    conn: socket.socket,
    fn: types.FunctionType,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    token: str,
) -> Any:
    """Call `fn(*args, **kwargs)` on the worker at the other end of `conn`."""
    return exchange(conn, prepare(fn, args, kwargs), token=token)
