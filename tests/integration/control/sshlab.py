"""The sshd testbed's hosts as the control end-to-end tests use them (``test_e2e_ssh.py`` and the
modules that share its fixture or its shims): free ports, the hosts' shims stopped, their
leftover containers removed, a repo committed, the sshd's connections cut."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker.errors

from tests.integration.tclcli import TclEnv
from tests.testbed import SshTestbed

VENV = str(Path(sys.executable).parent.parent)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Env(TclEnv):
    shim_dirs: dict[str, Path]


def cleanup(env: Env, docker_client: Any) -> None:
    """Stop what the tests left running, then remove any container of our runs."""
    runs = json.loads(env.tcl("ps", "-a", "--json", check=False).stdout or "[]")
    for r in runs:
        if r["state"] not in ("succeeded", "failed", "terminated"):
            env.tcl("stop", "--grace", "1", r["run_id"], check=False)
    ids = tuple(r["run_id"] for r in runs)
    # the low-level list (the high-level one inspects each container, and a shim may remove
    # one in between: NotFound)
    for c in docker_client.api.containers(all=True, filters={"label": "tcl.shim.task-id"}):
        if ids and (c.get("Labels") or {}).get("tcl.shim.task-id", "").startswith(ids):
            with contextlib.suppress(docker.errors.NotFound):
                docker_client.api.remove_container(c["Id"], force=True)


def stop_shims(shim_dirs: Iterable[Path]) -> None:
    """Stop the daemon shims `tcl host setup` started (pid files in their dirs)."""
    for d in shim_dirs:
        pid_file = d / "shim.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGTERM)


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
        check=True,
        capture_output=True,
    )


def kill_connections(tb: SshTestbed) -> int:
    """Kill every per-connection child of the 127.0.0.1:2222 sshd (cuts forwards too)."""
    listener = tb.pid("lo")
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(listener)], capture_output=True, text=True, check=False
    ).stdout.split()
    for pid in out:
        os.kill(int(pid), signal.SIGKILL)
    return len(out)
