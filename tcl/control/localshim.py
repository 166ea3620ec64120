"""The local default: a shim on this machine, started on demand as a detached daemon.

It listens on the Unix socket ``<state-dir>/local-shim/shim.sock`` (0600 in a 0700 dir; other
users' connections are dropped, and a client checks the listener runs as this user before it
sends the token: ``tcl.localsock``), with a token that is new at each start, uses the process
executor (or docker if configured) and outlives the ``tcl`` command that started it, so a
detached job keeps running. It starts with an allow-listed environment (``tcl.agentenv``), never
the whole shell of the ``tcl`` that started it. Its pid and flags are in
``<state-dir>/local-shim/shim.json`` (versioned, written atomically); the pid that is stopped is
the one the kernel reports for the socket's listener.

Many ``tcl`` processes may want it at once (parallel ``tcl submit -d``, ``tcl ps`` over several
runs), so starting is serialized by ``start.lock`` and the winner starts at most one daemon; the
shim itself refuses a state dir that another shim holds (``tcl.shim.server.lock_state_dir``).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tcl.agentenv import shim_env
from tcl.atomic import write_atomic
from tcl.control.detached import ensure_started, spawn_until, stop_pid
from tcl.localhttp import UnixHTTPConnection
from tcl.localsock import PeerError
from tcl.tokenfile import new_token

STATE_VERSION = 2
SOCKET = "shim.sock"


@dataclass(frozen=True)
class LocalShim:
    """Where the local shim answers, and how to talk to it."""

    socket: Path
    token: str
    pid: int  # the listener's, as the kernel reported it


def shim_state_dir(base: Path) -> Path:
    """The local shim's own ``--state-dir`` under its ``base`` (``<state-dir>/local-shim``)."""
    return base / "state"


def task_dir(base: Path, task_id: str) -> Path:
    """Where the local shim keeps a task (``tcl.shim.store``'s layout): its runner's files."""
    return shim_state_dir(base) / "tasks" / task_id


def shim_executable() -> list[str]:
    """``tcl-shim`` from this interpreter's environment."""
    beside = Path(sys.executable).parent / "tcl-shim"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("tcl-shim")
    if found:
        return [found]
    return [sys.executable, "-c", "from tcl.shim.main import main; main()"]


def _healthy(path: Path, token: str) -> int | None:
    """The listener's pid if this user's shim answers at ``path`` and takes ``token``; the token
    is sent only once the kernel has said the listener runs as this user."""
    conn = UnixHTTPConnection(path, "the local shim", 2.0)
    try:
        conn.request("GET", "/api/healthcheck", headers={"Authorization": f"Bearer {token}"})
        resp = conn.getresponse()
        resp.read()
        return conn.peer_pid if resp.status == 200 else None
    except PeerError as e:
        print(f"tcl: {e}", file=sys.stderr)
        return None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def _recorded(base: Path) -> tuple[dict[str, Any], str] | None:
    """The recorded shim's flags and the token, if both files are readable."""
    try:
        token = (base / "token").read_text().strip()
        st = json.loads((base / "shim.json").read_text())
        if st.get("version") != STATE_VERSION:
            return None
    except (ValueError, TypeError, OSError):
        return None
    return st, token


def _usable(base: Path, want: dict[str, Any]) -> LocalShim | None:
    """The recorded shim if it answers and runs with the wanted flags."""
    rec = _recorded(base)
    if rec is None:
        return None
    st, token = rec
    if {k: st.get(k) for k in want} != want:
        return None
    pid = _healthy(base / SOCKET, token)
    return None if pid is None else LocalShim(base / SOCKET, token, pid)


def ensure_local_shim(
    base: Path, executor: str, fake_accelerators: str | None, timeout_s: float = 30.0
) -> LocalShim:
    """A healthy local shim, started if needed (at most one however many callers ask at once:
    :func:`tcl.control.detached.ensure_started`)."""
    want = {"executor": executor, "fake_accelerators": fake_accelerators}

    def start() -> LocalShim:
        running = _running_pid(base)
        if running is not None:
            stop_pid(running)  # config changed: restart with the new flags
        return _start(base, want, timeout_s)

    return ensure_started(base, lambda: _usable(base, want), start, "the local shim", timeout_s)


def running_local_shim(
    base: Path, executor: str, fake_accelerators: str | None
) -> LocalShim | None:
    """The local shim if it runs, healthy, with these flags; never starts one."""
    return _usable(base, {"executor": executor, "fake_accelerators": fake_accelerators})


def _running_pid(base: Path) -> int | None:
    """The pid of this user's shim of ``base``, whatever its flags or record version: the
    kernel's for the socket's listener when it answers, else the recorded one if that process is
    still this user's tcl-shim of this state dir (a wedged shim, or one an older tcl started on
    TCP; never a pid that something else reused)."""
    rec = _recorded(base)
    if rec is not None:
        pid = _healthy(base / SOCKET, rec[1])
        if pid is not None:
            return pid
    try:
        recorded = int(json.loads((base / "shim.json").read_text())["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    import psutil

    try:
        proc = psutil.Process(recorded)
        ours = proc.uids().real == os.getuid() and str(shim_state_dir(base)) in proc.cmdline()
    except psutil.Error:
        return None
    return proc.pid if ours else None


def _start(base: Path, want: dict[str, Any], timeout_s: float) -> LocalShim:
    """Start the daemon and record it; the caller holds the starter lock. The token is new at
    each start (whoever read the old one has nothing)."""
    token_file = base / "token"
    token = new_token()
    write_atomic(token_file, token + "\n")  # 0600
    (base / "shim.json").unlink(missing_ok=True)
    argv = [
        *shim_executable(),
        "--uds",
        str(base / SOCKET),
        "--state-dir",
        str(shim_state_dir(base)),
        "--token-file",
        str(token_file),
        "--executor",
        str(want["executor"]),
    ]
    if want["fake_accelerators"]:
        argv += ["--fake-accelerators", str(want["fake_accelerators"])]

    def ready() -> int | None:
        return _healthy(base / SOCKET, token)

    env = shim_env(os.environ)
    pid, _ = spawn_until(argv, base / "shim.log", ready, "the local shim", timeout_s, 0.1, env=env)
    write_atomic(base / "shim.json", json.dumps({"version": STATE_VERSION, "pid": pid, **want}))
    return LocalShim(base / SOCKET, token, pid)


def stop_local_shim(base: Path) -> None:
    """Stop the local shim daemon if one runs (tests, `tcl host stop-local`)."""
    pid = _running_pid(base)
    if pid is not None:
        stop_pid(pid)
    (base / "shim.json").unlink(missing_ok=True)
