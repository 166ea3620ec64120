"""The runner's bearer token: every route but the healthcheck needs it, checked before the body
is read; bodies must be JSON; the WebSocket handshake needs it too; the token file is checked."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import httpx
import pytest
from starlette.websockets import WebSocketDisconnect

from tcl.runner.api import JobSpec, RunnerState
from tcl.runner.app import create_app
from tcl.runner.service import Runner

from .conftest import PY, TOKEN

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette's TestClient warns about httpx versions
    from starlette.testclient import TestClient

SPEC = JobSpec(run_id="r", argv=[PY, "-c", "print('pwned')"]).model_dump_json()


def http(runner: Runner) -> httpx.AsyncClient:
    app = create_app(runner, TOKEN)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://runner")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/submit"),
        ("PUT", "/api/code"),
        ("POST", "/api/code/cached"),
        ("POST", "/api/run"),
        ("POST", "/api/stop"),
        ("GET", "/api/events"),
        ("GET", "/api/metrics"),
    ],
)
@pytest.mark.parametrize("auth", [None, "Bearer wrong-token", f"Basic {TOKEN}", "Bearer "])
async def test_every_route_but_the_healthcheck_needs_the_token(
    runner: Runner, method: str, path: str, auth: str | None
) -> None:
    headers = {"Content-Type": "application/json"} | ({"Authorization": auth} if auth else {})
    async with http(runner) as c:
        r = await c.request(method, path, content=SPEC, headers=headers)
    assert r.status_code == 401
    assert r.json() == {"error": "unauthorized", "detail": "missing or wrong bearer token"}
    assert r.headers["www-authenticate"] == "Bearer"
    assert runner.state is RunnerState.WAITING_SPEC  # nothing was submitted or run


async def test_the_healthcheck_is_open_and_the_right_token_works(runner: Runner) -> None:
    async with http(runner) as c:
        assert (await c.get("/api/healthcheck")).status_code == 200
        r = await c.post(
            "/api/submit",
            content=SPEC,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
    assert r.status_code == 200, r.text
    assert runner.state is RunnerState.READY


async def test_the_token_is_checked_before_the_body_is_read(runner: Runner) -> None:
    read = 0

    async def body() -> httpx.AsyncByteStream:  # type: ignore[misc]
        nonlocal read
        for _ in range(50):
            read += 1
            yield b"x" * (1 << 20)

    async with http(runner) as c:
        r = await c.post(
            "/api/submit", content=body(), headers={"Content-Type": "application/json"}
        )
    assert r.status_code == 401
    assert read <= 1  # the app never pulled the 50 MB body


@pytest.mark.parametrize("media", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_bodies_must_be_json(runner: Runner, media: str | None) -> None:
    """What a web page can post cross-origin without a preflight is never accepted."""
    headers = {"Authorization": f"Bearer {TOKEN}"} | ({"Content-Type": media} if media else {})
    async with http(runner) as c:
        r = await c.post("/api/submit", content=SPEC, headers=headers)
        preflight = await c.options(
            "/api/submit",
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
        )
    assert (r.status_code, r.json()["error"]) == (415, "unsupported_media_type")
    assert runner.state is RunnerState.WAITING_SPEC
    assert "access-control-allow-origin" not in preflight.headers


def test_the_log_websocket_needs_the_token(runner: Runner) -> None:
    runner.submit(JobSpec(run_id="r", argv=[PY, "-c", "print('secret output')"]))
    runner.run()
    assert runner.wait(30)
    with TestClient(create_app(runner, TOKEN)) as client:
        for headers in ({}, {"Authorization": "Bearer nope"}):
            with (
                pytest.raises(WebSocketDisconnect),
                client.websocket_connect("/api/logs", headers=headers) as ws,
            ):
                ws.receive_text()
        with client.websocket_connect(
            "/api/logs", headers={"Authorization": f"Bearer {TOKEN}"}
        ) as ws:
            assert ws.receive_text()


def test_an_app_that_serves_needs_a_token(runner: Runner) -> None:
    with pytest.raises(ValueError, match="token"):
        create_app(runner, None)


def _serve(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "tcl.runner.main", "serve", "--port", "0"]
    argv += ["--state-dir", str(tmp_path / "state"), *extra]
    env = {k: v for k, v in os.environ.items() if k != "TCL_RUNNER_TOKEN_FILE"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)


def _token_file(tmp_path: Path, token: str, mode: int) -> Path:
    path = tmp_path / "token"
    path.write_text(token)
    path.chmod(mode)
    return path


@pytest.mark.parametrize(
    ("token", "mode", "says"),
    [
        (TOKEN, 0o644, "chmod 600"),
        ("short", 0o600, "too short"),
        ("", 0o600, "empty"),
    ],
)
def test_serve_refuses_a_bad_token_file_in_one_line(
    tmp_path: Path, token: str, mode: int, says: str
) -> None:
    proc = _serve(tmp_path, "--token-file", str(_token_file(tmp_path, token, mode)))
    assert proc.returncode == 2
    assert says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_serve_without_a_token_refuses_to_start(tmp_path: Path) -> None:
    proc = _serve(tmp_path)
    assert proc.returncode == 2
    assert "--token-file" in proc.stderr and "Traceback" not in proc.stderr
    proc = _serve(tmp_path, "--token-file", str(tmp_path))  # a directory
    assert proc.returncode == 2 and "is a directory" in proc.stderr, proc.stderr
