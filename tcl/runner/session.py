"""Interactive sessions: the command the runner builds for a ``session`` spec, and its port.

A session (``tcl repl``'s Jupyter Lab, ``@tcl.remote``'s call server) listens on the job's
loopback only, on a port the runner picks, and checks a key the runner makes (Jupyter's
token, the call server's handshake key). Nothing reaches it but ``WS /api/forward``, which
needs the runner's bearer token: the session is only as reachable as the runner's API, i.e.
through the tunnel of the user who owns the run.

The key is passed as a secret (the job's environment only, masked in every log line, never in
the ssh snippet); ``GET /api/session`` hands it to the CLI, which needs it for the URL.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tcl.runner.api import SessionInfo, SessionKind, SessionSpec
from tcl.runner.errors import ExecutorError

PROBE_TIMEOUT_S = 30.0
PORT_ENV = "TCL_SESSION_PORT"
TOKEN_ENV = "TCL_SESSION_TOKEN"
JUPYTER_TOKEN_ENV = "JUPYTER_TOKEN"  # read by jupyter_server itself: never on a command line

# What each kind needs importable in the interpreter that runs it.
_NEEDS = {SessionKind.JUPYTER: "jupyterlab", SessionKind.REMOTE: "cloudpickle"}
_INSTALL_HINT = {
    SessionKind.JUPYTER: "install jupyterlab in the job's image, or tcl-submit[interactive] "
    "where the runner runs",
    SessionKind.REMOTE: "install cloudpickle in the job's image (the same version as on the "
    "workstation)",
}


@dataclass(frozen=True)
class Session:
    """A started session's facts (the runner keeps one per job)."""

    kind: SessionKind
    port: int
    token: str
    python: str

    def info(self, running: bool, detail: str = "") -> SessionInfo:
        ready = running and port_open(self.port)
        if running and not ready and not detail:
            detail = "starting"
        return SessionInfo(
            kind=self.kind, ready=ready, token=self.token, python=self.python, detail=detail
        )


def free_port() -> int:
    """A port free on the loopback now (the session binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_open(port: int, timeout_s: float = 0.5) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout_s):
        return True
    return False


def _has_module(python: str, module: str, env: Mapping[str, str]) -> bool:
    """Whether ``python`` (as the job's PATH finds it) imports ``module``."""
    import importlib.util

    with contextlib.suppress(OSError, subprocess.SubprocessError):
        probe = f"import importlib.util as u, sys; sys.exit(u.find_spec({module!r}) is None)"
        proc = subprocess.run(
            [python, "-c", probe],
            env=dict(env),
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
        return proc.returncode == 0
    return python == sys.executable and importlib.util.find_spec(module) is not None


def pick_python(kind: SessionKind, env: Mapping[str, str], in_image: bool) -> str:
    """Jupyter: the job's own interpreter (``python3`` on its PATH) when it has Jupyter Lab,
    else the runner's. A remote call: as for a ``tcl.jobs`` job, the image's ``python3`` in an
    image (where the user's packages are), the runner's on a host (tcl's own environment,
    whose cloudpickle is the workstation's when both come from one lockfile)."""
    module = _NEEDS[kind]
    if kind is SessionKind.JUPYTER:
        candidates = ["python3", sys.executable]
    else:
        candidates = ["python3"] if in_image else [sys.executable]
    for python in candidates:
        if _has_module(python, module, env):
            return python
    raise ExecutorError(
        f"cannot start the {kind.value} session: no {module} in "
        f"{' or '.join(candidates)} ({_INSTALL_HINT[kind]})"
    )


@dataclass(frozen=True)
class Launch:
    session: Session
    argv: list[str]
    env: dict[str, str]  # added to the job's environment
    secrets: dict[str, str]  # added too, and masked in its logs


def start_spec(
    spec: SessionSpec,
    job_dir: Path,
    env: Mapping[str, str],
    in_image: bool,
    python: str | None = None,
) -> Launch:
    """The session, its argv and what to add to the job's environment; ``python``: the
    interpreter to run it with (default: :func:`pick_python`'s choice)."""
    python = python or pick_python(spec.kind, env, in_image)
    session = Session(spec.kind, free_port(), secrets.token_urlsafe(24), python)
    if spec.kind is SessionKind.JUPYTER:
        argv = [
            python,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={session.port}",
            "--ServerApp.port_retries=0",
            "--allow-root",
            f"--ServerApp.root_dir={job_dir}",
        ]
        return Launch(session, argv, {}, {JUPYTER_TOKEN_ENV: session.token})
    argv = [python, "-m", "tcl.remote.worker"]
    return Launch(session, argv, {PORT_ENV: str(session.port)}, {TOKEN_ENV: session.token})


def in_image(base: Mapping[str, str] | None = None) -> bool:
    """Whether the runner runs in its image (the job's python is the image's, not ours)."""
    from tcl.runner.jobenv import JOB_TCL_PATH_VAR

    return bool((os.environ if base is None else base).get(JOB_TCL_PATH_VAR))
