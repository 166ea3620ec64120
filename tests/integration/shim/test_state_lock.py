"""One shim per state dir: a second ``tcl-shim`` on a state dir in use refuses to start."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tcl.atomic import write_atomic

SHIM = str(Path(sys.executable).parent / "tcl-shim")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _argv(state: Path, token_file: Path, port: int) -> list[str]:
    return [
        SHIM,
        "--port",
        str(port),
        "--state-dir",
        str(state),
        "--token-file",
        str(token_file),
        "--executor",
        "process",
    ]


def test_a_second_shim_on_a_locked_state_dir_exits_2_naming_the_holder(tmp_path: Path) -> None:
    state, token_file = tmp_path / "state", tmp_path / "token"
    token = secrets.token_urlsafe(32)
    write_atomic(token_file, token)
    port = _free_port()
    first = subprocess.Popen(
        _argv(state, token_file, port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        # a bound on waiting for the first shim, not a timing assertion
        deadline = time.monotonic() + 60
        while True:
            assert first.poll() is None, "the first shim exited"
            try:
                headers = {"Authorization": f"Bearer {token}"}
                url = f"http://127.0.0.1:{port}/api/healthcheck"
                if httpx.get(url, headers=headers, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the first shim never answered"
            time.sleep(0.1)
        second = subprocess.run(
            _argv(state, token_file, _free_port()),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert second.returncode == 2
        (line,) = second.stderr.splitlines()
        assert f"pid {first.pid}, port {port}" in line and str(state) in line
        assert first.poll() is None  # the holder is untouched
    finally:
        first.terminate()
        first.wait(timeout=30)
