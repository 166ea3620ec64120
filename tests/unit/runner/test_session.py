"""Interactive sessions on the real runner app: GET /api/session, WS /api/forward (a byte stream
to the session's port only), POST /api/sync through HTTP (a real ``@tcl.remote`` call server
as the session: it starts fast and speaks a framed protocol we can check byte for byte)."""

from __future__ import annotations

import base64
import warnings
from pathlib import Path

import pytest
from starlette.websockets import WebSocketDisconnect

from tcl.remote import wire
from tcl.runner import session as sessionmod
from tcl.runner.api import (
    CodeRef,
    JobSpec,
    RunnerState,
    SessionKind,
    SessionSpec,
    SyncFile,
    SyncPatch,
)
from tcl.runner.app import create_app
from tcl.runner.client import RunnerAPIError, RunnerClient
from tcl.runner.service import Runner
from tcl.runner.treepatch import patch_id
from tcl.runner.wsroutes import CLOSE_NO_SESSION
from tests.polling import await_until

from .conftest import PY, TOKEN, sha, tarball

AUTH = {"Authorization": f"Bearer {TOKEN}"}

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

REMOTE = SessionSpec(kind=SessionKind.REMOTE)


async def _ready(client: RunnerClient) -> str:
    info = await await_until(client.session, 30, "the session to be ready", done=lambda i: i.ready)
    assert info.kind is SessionKind.REMOTE and info.token
    return info.token


async def test_forward_carries_bytes_to_the_session_and_only_there(
    runner: Runner, client: RunnerClient
) -> None:
    with pytest.raises(RunnerAPIError) as e:
        await client.session()  # no spec yet
    assert e.value.status == 409
    runner.submit(JobSpec(run_id="r", session=REMOTE))
    runner.run()
    token = await _ready(client)
    hello = wire.Hello(nonce=wire.new_nonce(), **wire.local_versions())
    app = create_app(runner, TOKEN)
    with TestClient(app, headers=AUTH) as http, http.websocket_connect("/api/forward") as ws:
        ws.send_bytes(wire.frame(hello))
        got = bytearray()
        while (frame := wire.take_frame(got)) is None:
            got += ws.receive_bytes()
        challenge = wire.decode(wire.Challenge, *frame)  # the session's own answer
        assert challenge.pid > 0
        assert wire.proof_ok(challenge.proof, token, wire.WORKER, challenge.nonce, hello.nonce)
    # The session's key never reaches the job's logs.
    assert token not in "".join(e.data or "" for e in runner.log.read(0)[0])


def test_forward_refuses_a_job_that_is_no_session(runner: Runner) -> None:
    runner.submit(JobSpec(run_id="r", argv=[PY, "-c", "import time; time.sleep(30)"]))
    runner.run()
    app = create_app(runner, TOKEN)
    for headers, code in ((AUTH, CLOSE_NO_SESSION), ({}, 1008)):  # no token: refused first
        http = TestClient(app, headers=headers)
        with pytest.raises(WebSocketDisconnect) as closed, http.websocket_connect("/api/forward"):
            pass
        assert closed.value.code == code


async def test_a_session_missing_its_module_is_refused_naming_it(
    runner: Runner, client: RunnerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sessionmod._NEEDS, SessionKind.JUPYTER, "no_such_module_here")
    runner.submit(JobSpec(run_id="r", session=SessionSpec(kind=SessionKind.JUPYTER)))
    with pytest.raises(RunnerAPIError) as e:
        await client.run()
    assert e.value.status == 422 and "no no_such_module_here in python3" in str(e.value.detail)
    assert runner.state is RunnerState.READY  # nothing started


def _patch(files: list[SyncFile]) -> SyncPatch:
    return SyncPatch(id=patch_id("a", "b", files), base="a", new_base="b", files=files)


async def test_sync_over_http_applies_big_patches_and_names_conflicts(
    runner: Runner, client: RunnerClient, tmp_path: Path
) -> None:
    code = tarball({"a.txt": b"old\n", "b.txt": b"keep\n"})
    runner.submit(
        JobSpec(
            run_id="r",
            argv=[PY, "-c", "import time; time.sleep(30)"],
            code=CodeRef(sha256=sha(code), size=len(code)),
        )
    )
    await client.upload_code(code, sha(code))
    await client.run()
    work = runner.workdir
    big = bytes(range(256)) * 8192  # 2 MiB: over the 1 MiB of other JSON bodies
    ack = await client.sync(
        _patch(
            [
                SyncFile(
                    path="a.txt",
                    old_sha256=sha(b"old\n"),
                    sha256=sha(b"new\n"),
                    data_b64=base64.b64encode(b"new\n").decode(),
                ),
                SyncFile(
                    path="data/big.bin", sha256=sha(big), data_b64=base64.b64encode(big).decode()
                ),
            ]
        )
    )
    assert ack.applied == 2 and ack.base == "b"
    assert (work / "a.txt").read_bytes() == b"new\n"
    assert (work / "data" / "big.bin").read_bytes() == big
    (work / "b.txt").write_text("changed remotely\n")
    with pytest.raises(RunnerAPIError) as e:
        await client.sync(
            _patch(
                [
                    SyncFile(
                        path="a.txt",
                        old_sha256=sha(b"new\n"),
                        sha256=sha(b"x\n"),
                        data_b64=base64.b64encode(b"x\n").decode(),
                    ),
                    SyncFile(path="b.txt", old_sha256=sha(b"keep\n"), sha256=None),
                ]
            )
        )
    assert e.value.status == 409 and e.value.error == "sync_conflict"
    assert "b.txt" in str(e.value.detail) and "a.txt" not in str(e.value.detail)
    assert (work / "a.txt").read_bytes() == b"new\n"  # nothing of it applied
