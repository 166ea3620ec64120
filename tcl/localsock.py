"""Unix sockets for the local agents (``tcl serve``, the local shim), the way dockerd and
ssh-agent are reached: the file system is the authentication.

The socket file is made 0600 inside the user's 0700 state dir, so only this user (and root) can
connect; each side also asks the kernel who is at the other end (``SO_PEERCRED``):

- a client sends nothing before :func:`connect_checked` has seen the listener run as this user
  (a stale record or a planted socket can no longer be answered by another user's process);
- a server built on :class:`PeerCheckedSocket` drops a connection from any other uid before
  it reads a byte.

The pid the kernel reports for the listener is the one a client may stop (never a pid the
listener says about itself). Standard library only, and light: the CLI's path to the daemon
and to its fork server imports this (HTTP over these sockets: ``tcl.localhttp``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import struct
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from pathlib import Path

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


class PeerError(OSError):
    """The process at the other end of a local socket is not this user's (or cannot be told)."""


class Peer(NamedTuple):
    pid: int
    uid: int
    gid: int


def peer_of(sock: socket.socket) -> Peer:
    """Who is at the other end of a connected Unix socket, as the kernel says."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
    pid, uid, gid = _UCRED.unpack(raw)
    return Peer(pid, uid, gid)


def check_peer(sock: socket.socket, what: str) -> Peer:
    """The peer if it runs as this user; else ``PeerError`` (and the socket is closed)."""
    peer = peer_of(sock)
    if peer.uid != os.geteuid():
        sock.close()
        raise PeerError(
            f"{what}: the process listening there runs as uid {peer.uid}, not as this user "
            f"(uid {os.geteuid()}); nothing was sent to it"
        )
    return peer


def connect_checked(
    path: str | Path, what: str, timeout_s: float | None
) -> tuple[socket.socket, Peer]:
    """A connection to ``path`` whose listener runs as this user (checked before any byte)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        raise
    return sock, check_peer(sock, what)


class PeerCheckedSocket(socket.socket):
    """A listening socket whose ``accept`` drops connections from other users (asyncio's
    event loop and uvicorn call ``accept`` on the socket they are given)."""

    def accept(self) -> tuple[socket.socket, object]:
        while True:
            conn, addr = super().accept()
            try:
                if peer_of(conn).uid == os.geteuid():
                    return conn, addr
            except OSError:
                pass
            conn.close()  # not ours: refused before a byte is read; try the next one


def listen_unix(path: Path, backlog: int = 128) -> PeerCheckedSocket:
    """Listen at ``path`` (mode 0600; a leftover socket file there is replaced: the caller holds
    the directory's lock, so no live agent owns it)."""
    parent = path.parent
    st = os.stat(parent)
    if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
        raise PeerError(
            f"{parent}: a local agent's socket needs a directory only this user can open "
            f"(mode {stat.S_IMODE(st.st_mode):04o}, owner uid {st.st_uid}); run chmod 700 {parent}"
        )
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            path.unlink()
    sock = PeerCheckedSocket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket file is created 0600, never briefly wider
    try:
        sock.bind(str(path))
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(backlog)
    sock.setblocking(False)
    return sock
