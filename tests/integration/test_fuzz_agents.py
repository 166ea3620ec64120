"""Fuzz the agents' HTTP APIs with schemathesis, against real processes.

Each test starts a real agent (``tcl-shim`` with the process executor and fake chips;
``tcl-runner serve``; the ``tcl serve`` daemon, on its Unix socket through a loopback relay),
hands schemathesis the agent's own OpenAPI spec, and requires no 5xx answer (check
``not_a_server_error``), no transport error, and a healthy agent afterwards.

Bounded for CI: ``TCL_FUZZ_MAX_EXAMPLES`` examples per operation and phase (default 15, about
half a minute per agent on a 2-core machine), a fixed seed (``TCL_FUZZ_SEED``, default 1) so a
failure reproduces; raise both locally to dig deeper.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import socket
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.shim.harness import TOKEN, Shim, cleanup_processes
from tests.integration.tclcli import stop_local_shim_and_tasks

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MAX_EXAMPLES = int(os.environ.get("TCL_FUZZ_MAX_EXAMPLES", "15"))
SEED = os.environ.get("TCL_FUZZ_SEED", "1")
RUN_TIMEOUT_S = 300  # a guard against a hung run, far above the expected time


def schemathesis(
    schema: dict[str, Any], base_url: str, work: Path, token: str | None, *extra: str
) -> dict[str, Any]:
    """Run ``schemathesis run`` on ``schema``; return its JSON report."""
    work.mkdir(parents=True, exist_ok=True)
    (work / "schema.json").write_text(json.dumps(schema))
    report = work / "report.json"
    argv = [
        str(BIN / "schemathesis"),
        "run",
        "schema.json",
        "--url",
        base_url,
        "--checks",
        "not_a_server_error",
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        SEED,
        "--workers",
        "1",
        "--request-timeout",
        "20",
        "--generation-database",
        "none",
        "--no-color",
        "--report",
        "json",
        "--report-json-path",
        str(report),
        *extra,
    ]
    if token is not None:
        argv += ["-H", f"Authorization: Bearer {token}"]
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": "tests.integration.schemathesis_hooks",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    # cwd: schemathesis and hypothesis keep caches in the working directory.
    proc = subprocess.run(
        argv, cwd=work, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    output = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert report.exists(), output
    result: dict[str, Any] = json.loads(report.read_text())
    print(f"schemathesis against {base_url}: {result['test_cases']}")  # shown with pytest -s
    assert result["complete"] and result["test_cases"]["generated"] > 0, output
    assert result["failures"] == [] and result["errors"] == [], output
    assert proc.returncode == 0, output
    return result


# -- the shim -----------------------------------------------------------------------------------
@pytest.fixture
def shim(tmp_path: Path) -> Iterator[Shim]:
    # The runner is a stand-in that exits at once: the fuzzer creates dozens of tasks, and a
    # real tcl-runner for each would swamp a 2-core machine without exercising the shim more.
    true = shutil.which("true")
    assert true is not None
    state_dir = tmp_path / "shim"
    shim = Shim(
        state_dir=state_dir,
        # --no-cluster-fs: a fuzzed cluster_fs is refused (424) before juicefs runs, a
        # directory is made or an address outside this machine is probed
        args=[
            "--executor",
            "process",
            "--fake-accelerators",
            "h100:8",
            "--runner-bin",
            true,
            "--no-cluster-fs",
        ],
    )
    asyncio.run(shim.start())
    yield shim
    shim.kill()
    if (state_dir / "instance_id").exists():
        cleanup_processes(shim.instance)


def test_fuzz_shim(shim: Shim, tmp_path: Path) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    schema = httpx.get(f"{shim.url}/openapi.json", headers=auth, timeout=10).json()
    assert httpx.get(f"{shim.url}/openapi.json", timeout=10).status_code == 401
    schemathesis(schema, shim.url, tmp_path / "fuzz", TOKEN)
    health = httpx.get(f"{shim.url}/api/healthcheck", headers=auth, timeout=10)
    assert health.status_code == 200 and health.json()["service"] == "tcl-shim"
    assert shim.proc is not None and shim.proc.poll() is None


# -- the runner ---------------------------------------------------------------------------------
@pytest.fixture
def runner(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A ``tcl-runner serve`` on a free port: (base url, its bearer token)."""
    port_file, state = tmp_path / "runner.port", tmp_path / "runner-state"
    argv = [
        str(BIN / "tcl-runner"),
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--port-file",
        str(port_file),
        "--state-dir",
        str(state),
    ]
    token = secrets.token_urlsafe(32)
    token_file = tmp_path / "runner.token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    argv += ["--token-file", str(token_file)]
    log = tmp_path / "runner.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        url = wait_runner(proc, port_file, log)
        yield url, token
    finally:
        proc.kill()
        proc.wait(timeout=20)


def wait_runner(proc: subprocess.Popen[bytes], port_file: Path, log: Path) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"tcl-runner exited: {log.read_text()[-3000:]}")
        if port_file.exists() and port_file.read_text().strip():
            url = f"http://127.0.0.1:{int(port_file.read_text())}"
            try:
                if httpx.get(f"{url}/api/healthcheck", timeout=2).status_code == 200:
                    return url
            except httpx.TransportError:
                pass
        time.sleep(0.05)
    raise RuntimeError(f"tcl-runner did not answer: {log.read_text()[-3000:]}")


def test_fuzz_runner(runner: tuple[str, str], tmp_path: Path) -> None:
    url, token = runner
    out = subprocess.run(
        [str(BIN / "tcl-runner"), "openapi"], capture_output=True, text=True, check=True
    ).stdout
    # POST /api/run is left out: it would execute the fuzzed spec's argv on this machine.
    schemathesis(json.loads(out), url, tmp_path / "fuzz", token, "--exclude-path", "/api/run")
    assert httpx.get(f"{url}/api/healthcheck", timeout=10).status_code == 200
    # The fuzzer had the token: it reached the routes behind it, not only 401s.
    events = httpx.get(f"{url}/api/events", headers={"Authorization": f"Bearer {token}"})
    assert events.status_code == 200


# -- the tcl serve daemon -----------------------------------------------------------------------
class _Relay(socketserver.ThreadingTCPServer):
    """Loopback TCP to the daemon's Unix socket, for schemathesis (which speaks TCP only)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, target: Path) -> None:
        self.target = target
        super().__init__(("127.0.0.1", 0), _RelayHandler)


class _RelayHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        assert isinstance(self.server, _Relay)
        upstream = socket.socket(socket.AF_UNIX)
        upstream.connect(str(self.server.target))
        client: socket.socket = self.request

        def pipe(src: socket.socket, dst: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := src.recv(65536):
                    dst.sendall(data)
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

        back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
        back.start()
        pipe(client, upstream)
        back.join(timeout=60)
        upstream.close()


@pytest.fixture
def serve_daemon(tmp_path: Path) -> Iterator[str]:
    """A real ``tcl serve`` (no scheduler) of a fresh state dir, reached through a relay."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("TCL_CONFIG", "TCL_DB_URL")}
    env.update(HOME=str(home), TCL_STATE_DIR=str(home / "state"))
    sock = home / "state" / "serve" / "daemon.sock"
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tcl.control.daemon", "--no-scheduler"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    relay = _Relay(sock)
    threading.Thread(target=relay.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{relay.server_address[1]}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            with contextlib.suppress(httpx.TransportError):
                if sock.exists() and httpx.get(f"{url}/api/healthcheck").status_code == 200:
                    break
            time.sleep(0.05)
        yield url
        assert proc.poll() is None, f"tcl serve died: {log.read_text()[-3000:]}"
    finally:
        relay.shutdown()
        proc.kill()
        proc.wait(timeout=20)
        # the fuzzed reads (a host check of the local default) may have started its shim
        stop_local_shim_and_tasks(home / "state" / "local-shim")


def test_fuzz_serve_daemon(serve_daemon: str, tmp_path: Path) -> None:
    url = serve_daemon
    schema = httpx.get(f"{url}/openapi.json", timeout=10).json()
    # POST /api/submit is left out: with no config it would run the fuzzed argv on this
    # machine; /api/shutdown would end the daemon under test.
    schemathesis(
        schema,
        url,
        tmp_path / "fuzz",
        None,
        "--exclude-path",
        "/api/submit",
        "--exclude-path",
        "/api/shutdown",
    )
    status = httpx.get(f"{url}/api/status", timeout=10)
    assert status.status_code == 200 and status.json()["streams"] == 0
