"""A session whose worker is a plain local subprocess: for tests and debugging. It is not the
product's transport (that is a remote session job reached through a port-forward)."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class SubprocessSession:
    """Spawns `python -m tcl.remote.worker` on a free port with a fresh token (both in its
    environment, never its argv) and waits until it accepts connections."""

    def __init__(
        self,
        *,
        python: str = sys.executable,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        start_timeout_s: float = 60.0,
    ) -> None:
        self.token = secrets.token_urlsafe(32)
        self.port = _free_port()
        full_env = {**os.environ, **(env or {})}
        full_env["TCL_SESSION_PORT"] = str(self.port)
        full_env["TCL_SESSION_TOKEN"] = self.token
        # The worker must import this very tcl, whatever the working directory.
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (_PACKAGE_ROOT, full_env.get("PYTHONPATH", "")) if p
        )
        self.proc = subprocess.Popen(
            [python, "-m", "tcl.remote.worker"], env=full_env, cwd=cwd, stdin=subprocess.DEVNULL
        )
        self._wait_ready(start_timeout_s)

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the worker exited with status {self.proc.returncode}")
            try:
                # The worker's gate drops this probe at its EOF.
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    self.close()
                    raise TimeoutError(
                        f"the worker did not listen within {timeout_s:.0f}s"
                    ) from None
                time.sleep(0.05)

    def connect(self) -> tuple[socket.socket, str]:
        return socket.create_connection(("127.0.0.1", self.port)), self.token

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
