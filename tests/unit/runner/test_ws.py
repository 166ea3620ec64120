"""WS /api/logs on the real app (Starlette's TestClient: in-process, no sockets)."""

from __future__ import annotations

import json
import warnings

import pytest
from starlette.websockets import WebSocketDisconnect

from tcl.runner.api import JobSpec, RunnerState
from tcl.runner.app import create_app
from tcl.runner.service import Runner

from .conftest import PY, TOKEN

AUTH = {"Authorization": f"Bearer {TOKEN}"}

with warnings.catch_warnings():
    # Starlette wants `httpx2` for its TestClient; httpx is what this project has.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient


def test_logs_resume_from_any_seq_and_close_normally_at_the_end(runner: Runner) -> None:
    runner.submit(JobSpec(run_id="r", argv=[PY, "-c", "for i in range(50): print(i, flush=True)"]))
    runner.run()
    assert runner.wait(30)
    last = runner.log.last_seq
    with TestClient(create_app(runner, TOKEN), headers=AUTH) as http:
        for after in (0, 1, last // 2, last - 1, last):
            seqs = []
            with http.websocket_connect(f"/api/logs?after={after}") as ws:
                with pytest.raises(WebSocketDisconnect) as closed:
                    while True:
                        seqs.append(json.loads(ws.receive_text())["seq"])
                assert closed.value.code == 1000
            assert seqs == list(range(after + 1, last + 1))
    events, _ = runner.log.read(last - 1)
    assert events[-1].state is RunnerState.SUCCEEDED


def test_logs_refuse_a_bad_cursor(runner: Runner) -> None:
    with TestClient(create_app(runner, TOKEN), headers=AUTH) as http:
        with (
            pytest.raises(WebSocketDisconnect) as closed,
            http.websocket_connect("/api/logs?after=-5") as ws,
        ):
            ws.receive_text()
        assert closed.value.code == 1008


def test_messages_from_the_client_do_not_end_the_stream(runner: Runner) -> None:
    runner.submit(JobSpec(run_id="r", argv=[PY, "-c", "import time; time.sleep(0.5); print('x')"]))
    runner.run()
    with (
        TestClient(create_app(runner, TOKEN), headers=AUTH) as http,
        http.websocket_connect("/api/logs") as ws,
    ):
        first = json.loads(ws.receive_text())
        ws.send_text("hello?")
        rest = []
        with pytest.raises(WebSocketDisconnect):
            while True:
                rest.append(json.loads(ws.receive_text()))
    assert first["seq"] == 1 and rest[-1]["state"] == "succeeded"
    assert [e["seq"] for e in rest] == list(range(2, runner.log.last_seq + 1))
