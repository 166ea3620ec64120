"""The TPU VM's shutdown-script Python (``tpu/scripts/notify_shutdown.py``) against the real
shim app and service served over loopback HTTP (its executor the in-memory fake of
tests/unit/shim): run as the shutdown-script runs it (``python -c TEXT TOKEN_FILE PORT GRACE_S
WAIT_S``), with the standard library only (``-I -S``: no tcl)."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import uvicorn

from tcl.control.backends.tpu import bootstrap
from tcl.control.backends.tpu.scripts import notify_shutdown
from tcl.shim.api import PreemptionNotice, TaskInfo, TaskSpec, TaskStatus, TerminationReason
from tcl.shim.app import create_app
from tests.unit.shim.test_app import TOKEN, Env, make_env, wait_status

WAIT_S = 60.0  # never sat out: every task ends long before


@pytest.fixture
async def shim(tmp_path: Path) -> AsyncIterator[tuple[Env, int]]:
    """The real shim app on a loopback port."""
    env = await make_env(tmp_path / "shim")
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    server = uvicorn.Server(
        uvicorn.Config(create_app(env.service, TOKEN), log_level="warning", lifespan="off")
    )
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            assert not serving.done(), "the shim's server ended before it started"
            await asyncio.sleep(0.01)
        yield env, sock.getsockname()[1]
    finally:
        server.should_exit = True
        await serving
        sock.close()
        await env.aclose()


async def notify(tmp_path: Path, port: int, token: str = TOKEN) -> tuple[int, str, str]:
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    proc = await asyncio.create_subprocess_exec(
        *[sys.executable, "-I", "-S", "-c", bootstrap._NOTIFY_PY],
        *[str(token_file), str(port), "20", f"{WAIT_S:g}"],
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), WAIT_S + 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def test_the_shutdown_script_sends_the_scripts_file() -> None:
    assert Path(notify_shutdown.__file__).read_text() == bootstrap._NOTIFY_PY


async def test_the_scripts_wire_is_the_shims(shim: tuple[Env, int]) -> None:
    env, _ = shim
    paths = create_app(env.service, TOKEN).openapi()["paths"]
    assert "post" in paths[notify_shutdown.PREEMPTION_PATH]
    assert "get" in paths[notify_shutdown.TASKS_PATH]
    assert {"message", "grace_s"} <= set(PreemptionNotice.model_fields)
    assert {"id", "status"} <= set(TaskInfo.model_fields)
    assert notify_shutdown.ENDED_STATUS == TaskStatus.TERMINATED


async def test_no_task_running(shim: tuple[Env, int], tmp_path: Path) -> None:
    _, port = shim
    code, out, err = await notify(tmp_path, port)
    assert (code, err) == (0, "")
    assert out.splitlines() == ["tcl shutdown: notified []", "tcl shutdown: no task running"]


async def test_a_running_task_is_preempted_and_waited_for(
    shim: tuple[Env, int], tmp_path: Path
) -> None:
    env, port = shim
    await env.client.submit_task(TaskSpec(id="a", image="img", accelerators=1))
    await wait_status(env.client, "a", TaskStatus.RUNNING)
    code, out, err = await notify(tmp_path, port)
    assert (code, err) == (0, "")
    assert out.splitlines() == ["tcl shutdown: notified ['a']", "tcl shutdown: no task running"]
    task = await env.client.get_task("a")
    assert task.status is TaskStatus.TERMINATED
    assert task.termination_reason is TerminationReason.PREEMPTED
    assert task.message == notify_shutdown.MESSAGE


async def test_a_wrong_token_fails(shim: tuple[Env, int], tmp_path: Path) -> None:
    _, port = shim
    code, out, err = await notify(tmp_path, port, token="wrong")
    assert code == 1 and out == "" and "HTTP Error 401" in err
