"""``tcl repl`` run as a user would: a process whose first stdout line is the URL."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
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

    def execute(self, code: str, timeout_s: float = 120) -> str:
        """Run ``code`` in a new notebook kernel (Jupyter's default, ``python3``) through the
        forward, as a notebook's cell: what it printed (an error raises, with its traceback)."""
        from websockets.sync.client import connect

        body = json.dumps({"name": "python3"}).encode()
        url = f"http://127.0.0.1:{self.port}/api/kernels?token={self.token}"
        req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout_s) as r:
            kernel = json.loads(r.read())["id"]
        ws_url = f"ws://127.0.0.1:{self.port}/api/kernels/{kernel}/channels?token={self.token}"
        msg_id = uuid.uuid4().hex
        request = {
            "header": {
                "msg_id": msg_id,
                "username": "test",
                "session": uuid.uuid4().hex,
                "msg_type": "execute_request",
                "version": "5.3",
            },
            "parent_header": {},
            "metadata": {},
            "content": {
                "code": code,
                "silent": False,
                "store_history": False,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,
            },
            "channel": "shell",
            "buffers": [],
        }
        printed: list[str] = []
        deadline = time.monotonic() + timeout_s
        with connect(ws_url, open_timeout=timeout_s, max_size=None) as ws:
            ws.send(json.dumps(request))
            while time.monotonic() < deadline:
                msg = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
                if msg.get("parent_header", {}).get("msg_id") != msg_id:
                    continue
                kind, content = msg["msg_type"], msg["content"]
                if kind == "stream":
                    printed.append(content["text"])
                elif kind == "error":
                    raise AssertionError("\n".join(content["traceback"]))
                elif kind == "status" and content["execution_state"] == "idle":
                    return "".join(printed)
        raise AssertionError(f"the cell did not finish in {timeout_s} s: {printed}")

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
