"""``tcl ssh`` into a Volcano run's pod: the API server's ``pods/exec`` stream, as ``kubectl exec
-i [-t]`` does it, with no ``kubectl`` and no sshd in the pod.

The session runs ``sh`` in the pod's container, which sources the job's working dir and env
(the file the runner writes when the job starts, named by the pod's ``TCL_RUNNER_SSH_ENV_FILE``)
and then runs the command with its words as given, or an interactive shell. This terminal's
stdin is relayed until its end (then the command's stdin is closed), the command's stdout and
stderr to ours, and its exit code is the session's. A shell gets a terminal (raw mode here,
the window's size sent at the start and on each resize), like ``ssh -t``; a command gets
none, so its output stays clean for pipes.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import ssl
import sys
from collections.abc import Iterator
from typing import Any

from tcl.control.backends.volcano.handle import KubeTarget
from tcl.control.backends.volcano.kube import KubeClient
from tcl.control.backends.volcano.manifest import SHELL_ENV_ENV

STDOUT, STDERR, ERROR, RESIZE = 1, 2, 3, 4
# $1.. the command; none: a shell (bash when the image has it)
SHELL = (
    f'[ -r "${{{SHELL_ENV_ENV}-}}" ] && . "${SHELL_ENV_ENV}"; '
    '[ "$#" -gt 0 ] && exec "$@"; command -v bash >/dev/null && exec bash; exec sh'
)
NO_EXIT_CODE = 255  # the stream ended without the command's status (as ssh's own failure)


def session_argv(command: list[str]) -> list[str]:
    return ["sh", "-c", SHELL, "tcl-ssh", *command]


def run_session(target: KubeTarget, pod: str, command: list[str]) -> int:
    """The session in ``pod``, relayed to this process's stdin, stdout and stderr; its exit
    code."""
    tty = not command and os.isatty(sys.stdin.fileno())
    kube = KubeClient(target.kubeconfig, target.context, target.namespace)
    try:
        ws = kube.open_exec(pod, session_argv(command), stdin=True, tty=tty)
        try:
            with _raw_terminal(ws) if tty else contextlib.nullcontext():
                return _relay(ws, sys.stdin.fileno())
        finally:
            ws.close()
    finally:
        kube.close()


def _relay(ws: Any, stdin_fd: int | None) -> int:
    from websocket import WebSocketException

    try:
        _pump(ws, stdin_fd)
    except (WebSocketException, OSError) as e:  # the connection went: no status follows
        sys.stderr.write(f"tcl ssh: the exec stream ended: {e}\n")
        return NO_EXIT_CODE
    _drain(ws)
    return _exit_code(ws)


def _pump(ws: Any, stdin_fd: int | None) -> None:
    sock = ws.sock.sock
    while ws.is_open():
        buffered = isinstance(sock, ssl.SSLSocket) and sock.pending()
        watched = [sock] if stdin_fd is None else [sock, stdin_fd]
        ready = watched if buffered else select.select(watched, [], [], 1.0)[0]
        if sock in ready:
            ws.update(timeout=0)
            _drain(ws)
        if stdin_fd is not None and stdin_fd in ready:
            try:
                data = os.read(stdin_fd, 65536)
            except OSError:
                data = b""
            if data:
                ws.write_stdin(data)
            else:  # its end: the command's stdin ends too
                ws.close_channel(0)
                stdin_fd = None


def _drain(ws: Any) -> None:
    for channel, fd in ((STDOUT, sys.stdout.fileno()), (STDERR, sys.stderr.fileno())):
        data = ws.read_channel(channel, timeout=0)
        view = memoryview(data or b"")
        while view:
            view = view[os.write(fd, view) :]


def _exit_code(ws: Any) -> int:
    """The command's exit code from the stream's status (``NO_EXIT_CODE`` when it sent none:
    the pod or the connection went first)."""
    raw = ws.read_channel(ERROR, timeout=0)
    try:
        status = json.loads(raw or b"{}")
    except ValueError:
        return NO_EXIT_CODE
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode" and str(cause.get("message", "")).isdigit():
            return int(cause["message"])
    if status.get("message"):
        sys.stderr.write(f"tcl ssh: {status['message']}\n")
    return NO_EXIT_CODE


@contextlib.contextmanager
def _raw_terminal(ws: Any) -> Iterator[None]:
    """This terminal in raw mode (keys go to the pod's shell as typed), its size sent now and
    on each resize; restored on the way out."""
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)

    def resize(*_: object) -> None:
        cols, rows = os.get_terminal_size(fd)
        with contextlib.suppress(Exception):  # the stream is closing
            ws.write_channel(RESIZE, json.dumps({"Width": cols, "Height": rows}).encode())

    old = signal.signal(signal.SIGWINCH, resize)
    try:
        tty.setraw(fd, termios.TCSADRAIN)  # as ssh: keys typed ahead are kept, not flushed
        resize()
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        signal.signal(signal.SIGWINCH, old)
