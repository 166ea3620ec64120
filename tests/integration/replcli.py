"""``tcl repl`` run as a user would: a process whose first stdout line is the URL."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from tests.integration.tclcli import TclEnv, start_tcl


@dataclass
class Repl:
    proc: subprocess.Popen[str]
    url: str

    @property
    def port(self) -> int:
        return int(self.url.split("localhost:", 1)[1].split("/", 1)[0])

    @property
    def token(self) -> str:
        return self.url.rsplit("token=", 1)[1]

    def get(self, path: str, token: bool = True, timeout_s: float = 30) -> tuple[int, Any]:
        """GET through the forward: (status, parsed JSON or text)."""
        sep = "&" if "?" in path else "?"
        url = f"http://127.0.0.1:{self.port}{path}" + (f"{sep}token={self.token}" if token else "")
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as r:
                body = r.read().decode()
                status = r.status
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        try:
            return status, json.loads(body)
        except ValueError:
            return status, body

    def interrupt(self, timeout_s: float = 60) -> tuple[int, str]:
        """Ctrl-C: (exit code, stderr)."""
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=timeout_s)
        return self.proc.returncode, err


def start_repl(env: TclEnv, *args: str, timeout_s: float = 300) -> Repl:
    """``tcl repl --no-browser ARGS``, once it printed its URL (fails with its stderr if not)."""
    proc = start_tcl(["repl", "--no-browser", *args], env.env(), env.repo)
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            line = proc.stdout.readline()
            if line.startswith("http://localhost:"):
                return Repl(proc, line.strip())
            if not line:
                break
        if proc.poll() is not None:
            break
    proc.kill()
    _, err = proc.communicate(timeout=30)
    raise AssertionError(f"tcl repl printed no URL (exit {proc.returncode}):\n{err}")
