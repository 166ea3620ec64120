"""The local default: a shim on this machine, started on demand as a detached daemon.

It listens on 127.0.0.1 with a token in a 0600 file, uses the process executor (or docker if
configured) and outlives the ``tcl`` command that started it, so a detached job keeps running.
Its pid and port are in ``<state-dir>/local-shim/shim.json`` (versioned, written atomically).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tcl.control.errors import AgentError

STATE_VERSION = 1


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write_atomic(path: Path, text: str, mode: int = 0o600) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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


def ensure_local_shim(
    base: Path, executor: str, fake_accelerators: str | None, timeout_s: float = 30.0
) -> tuple[int, str]:
    """Return (port, token) of a healthy local shim, starting one if needed."""
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    token_file = base / "token"
    if not token_file.exists():
        _write_atomic(token_file, secrets.token_urlsafe(32))
    token = token_file.read_text().strip()
    state_file = base / "shim.json"
    want = {"executor": executor, "fake_accelerators": fake_accelerators}
    if state_file.exists():
        try:
            st = json.loads(state_file.read_text())
            same = {k: st.get(k) for k in want} == want
            if _healthy(int(st["port"]), token):
                if same:
                    return int(st["port"]), token
                _stop_pid(int(st["pid"]))  # config changed: restart with the new flags
        except (ValueError, KeyError, OSError):
            pass
    port = _free_port()
    argv = [
        *shim_executable(), "--host", "127.0.0.1", "--port", str(port),
        "--state-dir", str(base / "state"), "--token-file", str(token_file),
        "--executor", executor,
    ]  # fmt: skip
    if fake_accelerators:
        argv += ["--fake-accelerators", fake_accelerators]
    with open(base / "shim.log", "ab") as log:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (base / "shim.log").read_text(errors="replace").strip().splitlines()[-3:]
            raise AgentError(f"the local shim exited ({proc.returncode}): {' / '.join(tail)}")
        if _healthy(port, token):
            state = {"version": STATE_VERSION, "pid": proc.pid, "port": port, **want}
            _write_atomic(state_file, json.dumps(state))
            return port, token
        time.sleep(0.1)
    raise AgentError(
        f"the local shim did not answer within {timeout_s:.0f} s (see {base}/shim.log)"
    )


def _stop_pid(pid: int) -> None:
    try:
        os.kill(pid, 15)
    except ProcessLookupError:
        return
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


def stop_local_shim(base: Path) -> None:
    """Stop the local shim daemon if one runs (tests, `tcl host stop-local`)."""
    state_file = base / "shim.json"
    if state_file.exists():
        with contextlib.suppress(ValueError, KeyError):
            _stop_pid(int(json.loads(state_file.read_text())["pid"]))
        state_file.unlink(missing_ok=True)
