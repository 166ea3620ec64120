"""The CLI fork server: one process per ``tcl serve`` daemon that has imported what the ``tcl``
commands need (typer, pydantic and the wire models, rich) and forks one child per command handed
to it (``tcl.cli.handoff``), so a command costs its own work and not a Python start with those
imports (~0.25 s of CPU each, most of a ``tcl ps``).

The daemon starts it (:func:`spawn`) and stops it; it also ends when the daemon is gone or its
socket file was replaced. It is single-threaded and runs no event loop, so forking it is safe.
Each child leads a session of its own (a stopped daemon does not take a running ``tcl logs -f``
with it), takes the client's stdin, stdout and stderr, directory, environment and umask, runs
the command as ``tcl`` would and writes its exit code to the client; a child ended by a signal
is answered for by the server.

Wire: ``tcl.cli.forkwire``. Connections from other users are dropped before a byte is read
(``tcl.localsock``), the socket is 0600 in the 0700 daemon dir.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import traceback
from pathlib import Path

from tcl.cli.forkwire import LENGTH, MAX_REQUEST, ForkRequest, WireError
from tcl.cli.handoff import FORWARDED

# what the handed commands import before their first line (tcl.cli.app mounts one of them)
PRELOAD = (
    "tcl.cli.app",
    "tcl.cli.ps",
    "tcl.cli.logs",
    "tcl.cli.submit",
    "tcl.cli.stop",
    "tcl.cli.hosts",
    "tcl.cli.metrics",
    "tcl.cli.matrix",
    "tcl.cli.checkpoints",
    "tcl.cli.served",
    "tcl.control.daemon.client",
    "rich.console",
    "rich.table",
)
CHECK_S = 1.0  # how often, when idle, it checks that its daemon and socket are still there


def spawn(sock: Path, log: int | None = None) -> subprocess.Popen[bytes]:
    """Start the fork server for ``sock`` as this process's child (``tcl serve`` does)."""
    argv = ["--socket", str(sock), "--parent", str(os.getpid())]
    return subprocess.Popen(
        [sys.executable, "-m", "tcl.cli.forkserver", *argv],
        stdin=subprocess.DEVNULL,
        stdout=log if log is not None else subprocess.DEVNULL,
        stderr=log if log is not None else subprocess.DEVNULL,
        start_new_session=True,
    )


def serve(path: Path, parent: int) -> None:
    """Serve until the daemon ``parent`` is gone (a daemon that died while this one was still
    importing is noticed too: it was once taken for the reaper that adopted this one, and this
    one served on forever) or ``path`` is another's."""
    from tcl.localsock import listen_unix
    from tcl.sourceprint import source_fingerprint

    for name in PRELOAD:
        importlib.import_module(name)
    source = source_fingerprint()
    if os.getppid() != parent:
        return
    listener = listen_unix(path, backlog=64)
    ino = os.stat(path).st_ino
    gc.freeze()  # every child shares what is here; its collections skip it
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes the poll through wake_w
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # the daemon's stop: clean up
    poll = select.poll()
    poll.register(listener, select.POLLIN)
    poll.register(wake_r, select.POLLIN)
    children: dict[int, socket.socket] = {}  # pid -> its client's connection
    inherited = [wake_r, wake_w]  # closed in each child, with the listener
    try:
        while True:
            for fd, _ in poll.poll(CHECK_S * 1000):
                if fd == listener.fileno():
                    _accept(listener, source, children, inherited)
                else:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_r, 512)
            _reap(children)
            if os.getppid() != parent or _replaced(path, ino):
                return
    finally:
        with contextlib.suppress(OSError):
            if os.stat(path).st_ino == ino:
                path.unlink()


def _replaced(path: Path, ino: int) -> bool:
    try:
        return os.stat(path).st_ino != ino
    except OSError:
        return True


def _accept(
    listener: socket.socket, source: str, children: dict[int, socket.socket], inherited: list[int]
) -> None:
    try:
        conn, _ = listener.accept()
    except (BlockingIOError, InterruptedError):
        return
    conn.setblocking(True)
    conn.settimeout(5.0)
    fds: list[int] = []
    try:
        body, fds = _read_request(conn)
        req = ForkRequest.decode(body)
        if req.source != source or req.python != sys.executable:
            conn.sendall(b"stale\n")
            conn.close()
            return
        # the signals a client relays stay pending in the child until its handlers are set (a
        # Ctrl-C relayed the moment it existed raised in an at-fork hook that runs Python,
        # coverage's under the tests, which swallowed it: the command never ended)
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        pid = os.fork()
        if pid != 0:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        else:
            # the server's own files are not the command's: the listener, the wake-up pipe,
            # the other clients' connections (their socket objects let go of them first, so
            # none can close a descriptor number the command reuses)
            for fd in [listener.detach(), *inherited, *(c.detach() for c in children.values())]:
                with contextlib.suppress(OSError):
                    os.close(fd)
            _child(req, fds, conn, mask)  # never returns
        children[pid] = conn
        conn.sendall(f"pid {pid}\n".encode())
    except (OSError, WireError) as e:
        with contextlib.suppress(OSError):
            conn.sendall(f"error {e}\n".encode())
        conn.close()
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)


def _read_request(conn: socket.socket) -> tuple[bytes, list[int]]:
    """The request's JSON and the three descriptors that came with it."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3)
    try:
        if len(fds) != 3:
            raise WireError("stdin, stdout and stderr must come with the request")
        while len(data) < LENGTH.size:
            data += _more(conn)
        (size,) = LENGTH.unpack_from(data)
        if size > MAX_REQUEST:
            raise WireError(f"a request of {size} bytes is over {MAX_REQUEST}")
        while len(data) < LENGTH.size + size:
            data += _more(conn)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return data[LENGTH.size : LENGTH.size + size], fds


def _more(conn: socket.socket) -> bytes:
    chunk = conn.recv(65536)
    if not chunk:
        raise WireError("the request ended early")
    return chunk


def _reap(children: dict[int, socket.socket]) -> None:
    """Children that ended: a signal's end is told to the client here (an exit code the child
    told itself; its copy of the connection is gone with it)."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is None:
            continue
        if os.WIFSIGNALED(status):
            with contextlib.suppress(OSError):
                conn.sendall(f"exit {128 + os.WTERMSIG(status)}\n".encode())
        conn.close()


def _child(
    req: ForkRequest, fds: list[int], conn: socket.socket, mask: set[int | signal.Signals]
) -> None:
    """In the fork: become the client's ``tcl`` command; write its exit code; exit. ``mask``:
    the signal mask to restore once the handlers are the command's."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a relayed signal lands from here
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        _stdio()
        os.environ.clear()
        os.environ.update(req.env)
        os.umask(req.umask)
        os.chdir(req.cwd)
        threading.Thread(target=_hang_up_with, args=(conn,), daemon=True).start()
        code = _run(req.argv)
    except KeyboardInterrupt:  # Ctrl-C before the command began
        code = 130
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    with contextlib.suppress(OSError):
        conn.sendall(f"exit {code}\n".encode())
    os._exit(code)


def _hang_up_with(conn: socket.socket) -> None:
    """A client that is gone without a signal this command got (SIGKILLed, its machine's
    session closed) leaves nobody to read the command or stop it: it ends as on a terminal's
    hang-up (SIGHUP), not as an orphan following a log for ever."""
    poll = select.poll()
    poll.register(conn, select.POLLIN | select.POLLHUP | select.POLLERR)
    while True:
        poll.poll()
        try:
            if conn.recv(4096):
                continue  # a client sends nothing after its request: dropped
        except (BlockingIOError, TimeoutError):
            continue
        except OSError:
            pass
        os.kill(os.getpid(), signal.SIGHUP)
        return


def _stdio() -> None:
    """sys.stdin/stdout/stderr on the client's streams, buffered as a Python started on them
    would be (line-buffered on a terminal)."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        old = getattr(sys, name)
        tty = os.isatty(fd)
        stream = open(  # noqa: SIM115  # it lives as long as the process
            fd,
            mode,
            buffering=1 if tty and mode == "w" else -1,
            encoding=old.encoding if old is not None else "utf-8",
            errors=old.errors if old is not None else "strict",
            closefd=False,
        )
        setattr(sys, name, stream)


def _run(argv: list[str]) -> int:
    from tcl.cli.main import run_here

    sys.argv = ["tcl", *argv]
    try:
        run_here(argv)
    except SystemExit as e:
        if isinstance(e.code, int):
            return e.code
        if e.code is not None:
            print(e.code, file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        return 130
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tcl.cli.forkserver", description=__doc__)
    ap.add_argument("--socket", required=True, type=Path)
    ap.add_argument("--parent", required=True, type=int, help="the daemon's pid: ends with it")
    args = ap.parse_args(argv)
    serve(args.socket, args.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
