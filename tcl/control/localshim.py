"""The local default: a shim on this machine, started on demand as a detached daemon.

It listens on 127.0.0.1 with a token in a 0600 file, uses the process executor (or docker if
configured) and outlives the ``tcl`` command that started it, so a detached job keeps running.
Its pid and port are in ``<state-dir>/local-shim/shim.json`` (versioned, written atomically).

Many ``tcl`` processes may want it at once (parallel ``tcl submit -d``, ``tcl ps`` over several
runs), so starting is serialized by ``start.lock`` and the winner starts at most one daemon; the
shim itself refuses a state dir that another shim holds (``tcl.shim.server.lock_state_dir``).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

import httpx

from tcl.atomic import write_atomic
from tcl.control.detached import ensure_started, spawn_until, stop_pid

STATE_VERSION = 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shim_executable() -> list[str]:
    """``tcl-shim`` from this interpreter's environment."""
    beside = Path(sys.executable).parent / "tcl-shim"
    if beside.exists():
        return [str(beside)]
    found = shutil.which("tcl-shim")
    if found:
        return [found]
    return [sys.executable, "-c", "from tcl.shim.main import main; main()"]


def _healthy(port: int, token: str) -> bool:
    try:
        r = httpx.get(
            f"http://127.0.0.1:{port}/api/healthcheck",
            headers={"Authorization": f"Bearer {token}"},
            timeout=2.0,
        )
        return r.status_code == 200
    except httpx.HTTPError:
        return False


def _recorded(base: Path) -> tuple[dict[str, Any], str] | None:
    """The recorded shim's state and the token, if both files are readable."""
    try:
        token = (base / "token").read_text().strip()
        st = json.loads((base / "shim.json").read_text())
        int(st["pid"]), int(st["port"])
    except (ValueError, KeyError, TypeError, OSError):
        return None
    return st, token


def _usable(base: Path, want: dict[str, Any]) -> tuple[int, str] | None:
    """(port, token) of the recorded shim if it answers and runs with the wanted flags."""
    rec = _recorded(base)
    if rec is None:
        return None
    st, token = rec
    if {k: st.get(k) for k in want} != want or not _healthy(int(st["port"]), token):
        return None
    return int(st["port"]), token


def ensure_local_shim(
    base: Path, executor: str, fake_accelerators: str | None, timeout_s: float = 30.0
) -> tuple[int, str]:
    """Return (port, token) of a healthy local shim, starting one if needed (at most one
    however many callers ask at once: :func:`tcl.control.detached.ensure_started`)."""
    want = {"executor": executor, "fake_accelerators": fake_accelerators}

    def start() -> tuple[int, str]:
        if not (base / "token").exists():
            write_atomic(base / "token", secrets.token_urlsafe(32))
        rec = _recorded(base)
        if rec is not None and _healthy(int(rec[0]["port"]), rec[1]):
            stop_pid(int(rec[0]["pid"]))  # config changed: restart with the new flags
        return _start(base, want, timeout_s)

    return ensure_started(base, lambda: _usable(base, want), start, "the local shim", timeout_s)


def _start(base: Path, want: dict[str, Any], timeout_s: float) -> tuple[int, str]:
    """Start the daemon and record it; the caller holds the starter lock."""
    token_file = base / "token"
    token = token_file.read_text().strip()
    port = _free_port()
    argv = [
        *shim_executable(), "--host", "127.0.0.1", "--port", str(port),
        "--state-dir", str(base / "state"), "--token-file", str(token_file),
        "--executor", str(want["executor"]),
    ]  # fmt: skip
    if want["fake_accelerators"]:
        argv += ["--fake-accelerators", str(want["fake_accelerators"])]

    def healthy() -> bool | None:
        return True if _healthy(port, token) else None

    _, pid = spawn_until(argv, base / "shim.log", healthy, "the local shim", timeout_s, 0.1)
    state = {"version": STATE_VERSION, "pid": pid, "port": port, **want}
    write_atomic(base / "shim.json", json.dumps(state))
    return port, token


def stop_local_shim(base: Path) -> None:
    """Stop the local shim daemon if one runs (tests, `tcl host stop-local`)."""
    state_file = base / "shim.json"
    if state_file.exists():
        with contextlib.suppress(ValueError, KeyError):
            stop_pid(int(json.loads(state_file.read_text())["pid"]))
        state_file.unlink(missing_ok=True)
