"""A ``tcl`` command handed to the CLI fork server that ``tcl serve`` keeps warm
(``tcl.cli.forkserver``): this process only connects, passes its stdin, stdout and stderr, its
directory and environment, forwards the signals it gets (Ctrl-C included) to the command and
exits with its exit code. Standard library only: it runs before anything else is imported, and
when no fork server answers (none runs, ``TCL_SERVE=0`` or ``TCL_CLI_FORK=0``, another tcl's
code) the command runs in this process as before."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
from types import FrameType
from typing import BinaryIO

from tcl.cli.forkwire import ForkRequest, socket_path

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
CONNECT_TIMEOUT_S = 2.0


def handed_off(args: list[str]) -> int | None:
    """The exit code of ``tcl ARGS`` run by the fork server, or None when this process must
    run it."""
    if "0" in (os.environ.get("TCL_SERVE"), os.environ.get("TCL_CLI_FORK")):
        return None
    path = socket_path()
    if not os.path.exists(path):
        return None
    from tcl.localsock import connect_checked
    from tcl.sourceprint import source_fingerprint

    try:
        sock, _peer = connect_checked(path, "tcl's CLI fork server", CONNECT_TIMEOUT_S)
    except OSError:
        return None  # none listens (a daemon that ended), or not this user's
    with sock:
        umask = os.umask(0)
        os.umask(umask)
        req = ForkRequest(
            argv=args,
            cwd=os.getcwd(),
            env=dict(os.environ),
            umask=umask,
            source=source_fingerprint(),
            python=sys.executable,
        )
        # a signal from here on is the command's: held until its pid is known, then forwarded
        relay = _Relay()
        previous = {sig: signal.signal(sig, relay.forward) for sig in FORWARDED}
        try:
            data = req.encode()
            sent = socket.send_fds(sock, [data], [0, 1, 2])
            sock.sendall(data[sent:])
            lines = sock.makefile("rb")
            first = lines.readline().decode(errors="replace").split()
        except OSError:
            first = []
        if len(first) != 2 or first[0] != "pid":
            # stale (other code), or it could not read us: nothing was started, and this
            # process runs the command (a signal held meanwhile takes its usual course)
            for forwarded, handler in previous.items():
                signal.signal(forwarded, handler)
            for held in relay.held:
                signal.raise_signal(held)
            return None
        relay.start(int(first[1]))
        return _wait(lines, sock)


class _Relay:
    """This process's signals, forwarded to the forked command (held until it is there)."""

    def __init__(self) -> None:
        self.pid = 0
        self.held: list[int] = []

    def forward(self, sig: int, _frame: FrameType | None) -> None:
        if not self.pid:
            self.held.append(sig)
            return
        with contextlib.suppress(OSError):
            os.kill(self.pid, sig)

    def start(self, pid: int) -> None:
        self.pid = pid
        held, self.held = self.held, []
        for sig in held:
            self.forward(sig, None)


def _wait(lines: BinaryIO, sock: socket.socket) -> int:
    """Until the command tells its exit code (the relay forwards the signals meanwhile)."""
    sock.settimeout(None)
    while True:
        try:
            line = lines.readline().decode(errors="replace").split()
        except InterruptedError:
            continue
        except OSError:
            line = []
        if len(line) == 2 and line[0] == "exit":
            return int(line[1])
        if not line:  # the server went away with the command's end unknown
            print(
                "tcl: the CLI fork server went away; the command's end is unknown", file=sys.stderr
            )
            return 1
