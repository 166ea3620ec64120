"""Starting a detached local agent once, however many ``tcl`` processes ask at the same time.

Both local agents (the local shim, the ``tcl serve`` daemon) outlive the command that starts
them and are found again through a small JSON record in their directory. Many ``tcl`` processes
may want one at once (parallel ``tcl submit``, ``tcl ps`` over several runs), so starting is
serialized by ``start.lock``: the holder re-checks and starts at most one; the others keep
checking while they wait and use the new agent as soon as it answers.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from tcl.control.errors import AgentError

START_LOCK = "start.lock"
T = TypeVar("T")


def ensure_started(
    base: Path,
    usable: Callable[[], T | None],
    start: Callable[[], T],
    what: str,
    wait_s: float,
) -> T:
    """``usable()`` if it answers, else ``start()`` under ``base/start.lock`` (``flock``; each
    call opens its own file description, so threads of one process exclude each other too).
    ``wait_s``: how long a holder may take to start one (the others outwait it)."""
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    found = usable()
    if found is not None:
        return found
    lock = base / START_LOCK
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + wait_s + 30
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pass
            found = usable()
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise AgentError(f"another tcl has held {lock} too long starting {what}")
            time.sleep(0.05)
        found = usable()  # started by the previous holder
        if found is not None:
            return found
        return start()
    finally:
        os.close(fd)  # drops the lock


def spawn_until(
    argv: list[str],
    log: Path,
    ready: Callable[[], T | None],
    what: str,
    timeout_s: float,
    poll_s: float = 0.05,
    env: dict[str, str] | None = None,
) -> tuple[T, int]:
    """Start ``argv`` detached (own session, output appended to ``log``, 0600) and return what
    ``ready()`` gives once it gives something, and the pid; an ``AgentError`` (naming the log's
    last lines) when it exits first or stays silent for ``timeout_s``. ``env``: the agent's whole
    environment (``tcl.agentenv``: an allow-list, never the caller's shell as it is)."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)  # one made before files were kept private
    with os.fdopen(fd, "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
            env=env,
            cwd=log.parent,
        )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:]
            raise AgentError(f"{what} exited ({proc.returncode}): {' / '.join(tail)}")
        found = ready()
        if found is not None:
            # reaped the moment it exits (killed, say): a zombie would still look alive to a
            # pid check, and nothing else in a long-lived caller (tcl serve) waits for it
            threading.Thread(target=proc.wait, name=f"reap {proc.pid}", daemon=True).start()
            return found, proc.pid
        time.sleep(poll_s)
    raise AgentError(f"{what} did not answer within {timeout_s:.0f} s (see {log})")


def stop_pid(pid: int, grace_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; returns once the process is gone (the next
    agent can only start once this one has released its directory's lock, that is, exited)."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
