"""The worker's front door: one thread accepts every connection and runs all handshakes at once
(non-blocking sockets under a selector), each within HANDSHAKE_DEADLINE_S of its accept. A local
user who trickles bytes or never speaks holds one file descriptor and a few KiB for a few
seconds, never the worker: a legitimate handshake goes through beside any number of them. An
authenticated connection is handed over (as a blocking Channel) to whoever runs the calls.

The protocol is in :mod:`tcl.remote.wire`. Stdlib only: the worker imports this in the user's
environment."""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tcl.remote import wire
from tcl.remote.errors import ProtocolError

HANDSHAKE_DEADLINE_S = 5.0
# Handshakes in progress at once; beyond, the oldest is dropped (a flood evicts itself, and a
# legitimate handshake takes one round trip).
MAX_PENDING = 256
_CHUNK = 4096


def _log(msg: str) -> None:
    print(f"tcl.remote.worker[{os.getpid()}]: {msg}", file=sys.__stderr__, flush=True)


@dataclass(eq=False)
class _Pending:
    """One connection in its handshake. `hello` is set once HELLO was answered; `refused` once
    the worker said why it hangs up (it then discards what still comes, until EOF or the
    deadline, so that closing does not reset the connection before the client reads why)."""

    sock: socket.socket
    deadline: float
    buf: bytearray = field(default_factory=bytearray)
    hello: wire.Hello | None = None
    nonce: str = ""
    refused: bool = False


class Gate:
    """Runs on one thread; `admit` gets each authenticated connection (in its own thread's
    context: it only queues it)."""

    def __init__(
        self,
        srv: socket.socket,
        key: str,
        admit: Callable[[wire.Channel], None],
        deadline_s: float = HANDSHAKE_DEADLINE_S,
    ) -> None:
        self._srv, self._key, self._admit, self._deadline_s = srv, key, admit, deadline_s
        self._sel = selectors.DefaultSelector()
        self._pending: dict[socket.socket, _Pending] = {}  # in accept order
        self._versions = wire.local_versions()

    def run(self) -> None:
        """Accept and handshake for ever (the worker's daemon thread)."""
        self._srv.setblocking(False)
        self._sel.register(self._srv, selectors.EVENT_READ)
        while True:
            timeout = None
            if self._pending:
                soonest = min(p.deadline for p in self._pending.values())
                timeout = max(0.0, soonest - time.monotonic())
            for key, _ in self._sel.select(timeout):
                if key.fileobj is self._srv:
                    self._accept()
                elif key.data.sock in self._pending:
                    self._read(key.data)
            now = time.monotonic()
            for p in [p for p in self._pending.values() if p.deadline <= now]:
                if not p.refused:
                    self._send(p, wire.Refused("deadline", "the handshake took too long"))
                self._drop(p)

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._srv.accept()
            except BlockingIOError:
                return
            except OSError as e:  # out of file descriptors: make room
                _log(f"accept failed: {e}")
                if not self._pending:
                    time.sleep(0.1)
                    return
                self._drop(next(iter(self._pending.values())))
                continue
            if len(self._pending) >= MAX_PENDING:
                self._drop(next(iter(self._pending.values())))
            sock.setblocking(False)
            p = _Pending(sock, time.monotonic() + self._deadline_s)
            self._pending[sock] = p
            self._sel.register(sock, selectors.EVENT_READ, p)

    def _read(self, p: _Pending) -> None:
        try:
            chunk = p.sock.recv(_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._drop(p)  # e.g. a readiness probe
            return
        if p.refused:
            return
        p.buf += chunk
        try:
            while p.sock in self._pending and not p.refused:
                got = wire.take_frame(p.buf, wire.MAX_CONTROL_FRAME)
                if got is None or self._step(p, *got):
                    return
        except ProtocolError as e:
            self._refuse(p, wire.Refused("protocol", str(e)))

    def _step(self, p: _Pending, kind: bytes, body: bytes) -> bool:
        """Handle one handshake frame; True once the connection was handed over."""
        if p.hello is None:
            hello = wire.decode(wire.Hello, kind, body)
            if not wire.nonce_ok(hello.nonce):
                raise ProtocolError("malformed Hello: bad nonce")
            peer = {"python": hello.python, "cloudpickle": hello.cloudpickle}
            problem = wire.version_problem(self._versions, peer)
            if problem is not None:
                self._refuse(p, wire.Refused("version", problem))
                return False
            p.hello, p.nonce = hello, wire.new_nonce()
            mine = wire.proof(self._key, wire.WORKER, p.nonce, hello.nonce)
            self._send(
                p,
                wire.Challenge(nonce=p.nonce, proof=mine, pid=os.getpid(), **self._versions),
            )
            return False
        given = wire.decode(wire.Proof, kind, body)
        if not wire.proof_ok(given.proof, self._key, wire.CLIENT, p.nonce, p.hello.nonce):
            self._refuse(p, wire.Refused("token", "wrong session token"))
            return False
        self._forget(p)
        p.sock.setblocking(True)
        self._admit(wire.Channel(p.sock, bytes(p.buf)))  # the CALL may have come along
        return True

    def _send(self, p: _Pending, msg: wire.Message) -> None:
        """A handshake reply: a few hundred bytes into an empty send buffer, so it never blocks;
        a peer that would make it block is dropped."""
        data = wire.frame(msg)
        try:
            if p.sock.send(data) == len(data):
                return
        except OSError:
            pass
        self._drop(p)

    def _refuse(self, p: _Pending, why: wire.Refused) -> None:
        self._send(p, why)
        p.refused = True
        with contextlib.suppress(OSError):
            p.sock.shutdown(socket.SHUT_WR)

    def _forget(self, p: _Pending) -> None:
        if self._pending.pop(p.sock, None) is not None:
            self._sel.unregister(p.sock)

    def _drop(self, p: _Pending) -> None:
        self._forget(p)
        p.sock.close()
