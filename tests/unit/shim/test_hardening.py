"""The shim against a local attacker and hostile input, through the real app (in-process ASGI).

Auth before the body, a body limit, bounded and strict fields, safe task ids, the error shape
for every answer, and slow disk work (deleting a task dir, fsynced writes) kept off the loop.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from tcl.shim.api import MAX_ENV_VALUE_LEN, TaskSpec, TaskStatus, TerminationReason
from tcl.shim.app import MAX_BODY_BYTES, create_app
from tcl.shim.errors import BadRequest
from tcl.shim.store import TaskStore
from tests.unit.shim.test_app import TOKEN, Env, make_env, wait_status

MIB = 1024 * 1024
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def shim(tmp_path: Path) -> AsyncIterator[Env]:
    e = await make_env(tmp_path)
    yield e
    await e.aclose()


@pytest.fixture
async def raw(shim: Env) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=shim.app, base_url="http://shim", headers=AUTH) as c:
        yield c


def fields(resp: httpx.Response) -> set[str]:
    body = resp.json()
    assert body["error"] == "invalid_request", body
    return {d["field"] for d in body["detail"]}


# -- task ids -----------------------------------------------------------------------------------
async def test_dot_ids_are_refused_and_the_state_dir_survives(
    shim: Env, raw: httpx.AsyncClient
) -> None:
    await shim.client.submit_task(TaskSpec(id="keep", image="img"))
    marker = shim.state_dir / "token"
    marker.write_text("do not delete")
    for bad in (".", ".."):
        r = await raw.post("/api/tasks", json={"id": bad, "image": "img"})
        assert r.status_code == 422 and fields(r) == {"id"}
    # The attack: percent-encoded dots reach the route as the task id "..".
    for method, path in [
        ("GET", "/api/tasks/%2E%2E"),
        ("POST", "/api/tasks/%2E%2E/terminate"),
        ("DELETE", "/api/tasks/%2E%2E"),
        ("DELETE", "/api/tasks/%2E"),
        ("DELETE", "/api/tasks/-rf"),
    ]:
        r = await raw.request(method, path)
        assert r.status_code == 422 and fields(r) == {"task_id"}, (method, path, r.text)
    assert marker.read_text() == "do not delete"
    assert (shim.state_dir / "tasks" / "keep" / "task.json").exists()
    assert (await shim.client.get_task("keep")).id == "keep"


def test_store_never_builds_a_path_from_a_bad_id(tmp_path: Path) -> None:
    store = TaskStore(tmp_path)
    for bad in ("", ".", "..", "a/b", "../x", "-x", "x" * 129):
        with pytest.raises(BadRequest):
            store.task_dir(bad)
    assert store.task_dir("_a.b-1") == tmp_path / "tasks" / "_a.b-1"


# -- auth before the body; the body limit -------------------------------------------------------
class Upload:
    """An ASGI request whose body arrives in chunks; counts the bytes the app took."""

    def __init__(self, total: int, chunk: int = MIB) -> None:
        self.left = total
        self.chunk = chunk
        self.consumed = 0
        self.status = 0
        self.headers: dict[str, str] = {}
        self.body = b""

    async def receive(self) -> dict[str, Any]:
        if self.left <= 0:
            return {"type": "http.disconnect"}
        n = min(self.chunk, self.left)
        self.left -= n
        self.consumed += n
        return {"type": "http.request", "body": b"x" * n, "more_body": self.left > 0}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = {k.decode(): v.decode() for k, v in message["headers"]}
        elif message["type"] == "http.response.body":
            self.body += message.get("body", b"")


async def post(shim: Env, upload: Upload, headers: dict[str, str], length: bool) -> Upload:
    """POST /api/tasks straight into the app, with or without a Content-Length (chunked)."""
    hdrs = {"content-type": "application/json", **{k.lower(): v for k, v in headers.items()}}
    if length:
        hdrs["content-length"] = str(upload.left)
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/tasks",
        "raw_path": b"/api/tasks",
        "query_string": b"",
        "root_path": "",
        "headers": [(k.encode(), v.encode()) for k, v in hdrs.items()],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 10998),
    }
    app = create_app(shim.service, TOKEN)
    await app(scope, upload.receive, upload.send)
    return upload


@pytest.mark.parametrize("length", [True, False], ids=["content-length", "chunked"])
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}], ids=["none", "wrong"])
async def test_unauthenticated_body_is_never_read(
    shim: Env, headers: dict[str, str], length: bool
) -> None:
    up = await post(shim, Upload(50 * MIB), headers, length)
    assert up.status == 401 and up.consumed == 0
    assert up.headers["www-authenticate"] == "Bearer"
    assert json.loads(up.body)["error"] == "unauthorized"


async def test_body_over_the_limit_is_refused(shim: Env) -> None:
    declared = await post(shim, Upload(2 * MIB), AUTH, length=True)
    assert declared.status == 413 and declared.consumed == 0  # refused on the header alone
    assert json.loads(declared.body)["error"] == "payload_too_large"
    chunk = 64 * 1024
    streamed = await post(shim, Upload(2 * MIB, chunk), AUTH, length=False)
    assert streamed.status == 413
    assert streamed.consumed <= MAX_BODY_BYTES + chunk  # stopped at the first chunk past it
    assert json.loads(streamed.body)["error"] == "payload_too_large"


async def test_a_body_under_the_limit_is_served(raw: httpx.AsyncClient) -> None:
    env = {f"V{i}": "v" * MAX_ENV_VALUE_LEN for i in range(MAX_BODY_BYTES // MAX_ENV_VALUE_LEN - 2)}
    r = await raw.post("/api/tasks", json={"id": "big", "image": "img", "env": env})
    assert r.status_code == 201, r.text


# -- bounded, strict fields ---------------------------------------------------------------------
BIG_FIELDS: list[tuple[dict[str, Any], str]] = [
    ({"env": {f"K{i}": "" for i in range(257)}}, "env"),
    ({"env": {"K": "v" * (32 * 1024 + 1)}}, "env.K"),
    ({"env": {"K" * 257: ""}}, "env." + "K" * 257 + ".[key]"),
    ({"env": {"A=B": ""}}, "env.A=B.[key]"),
    ({"ssh_keys": ["k"] * 33}, "ssh_keys"),
    ({"ssh_keys": ["k" * (16 * 1024 + 1)]}, "ssh_keys.0"),
    ({"mounts": [{"source": "/a", "target": "/b"}] * 65}, "mounts"),
    ({"name": "n" * 513}, "name"),
    ({"image": "i" * 513}, "image"),
    ({"registry_auth": {"username": "u", "password": "p" * (16 * 1024 + 1)}}, "registry_auth"),
    ({"accelerators": list(range(4097))}, "accelerators"),
    ({"memory_bytes": 2**63}, "memory_bytes"),
]


@pytest.mark.parametrize(("extra", "field"), BIG_FIELDS, ids=[f for _, f in BIG_FIELDS])
async def test_oversized_fields_are_refused(
    raw: httpx.AsyncClient, extra: dict[str, Any], field: str
) -> None:
    r = await raw.post("/api/tasks", json={"id": "t", "image": "img", **extra})
    assert r.status_code == 422
    assert any(f.startswith(field) for f in fields(r)), fields(r)


NOT_NUMBERS: list[tuple[str, dict[str, Any], str]] = [
    ("/api/tasks", {"accelerators": True}, "accelerators"),
    ("/api/tasks", {"accelerators": [True]}, "accelerators"),
    ("/api/tasks", {"cpus": True}, "cpus"),
    ("/api/tasks", {"memory_bytes": True}, "memory_bytes"),
    ("/api/tasks", {"shm_bytes": "1"}, "shm_bytes"),
    ("/api/tasks", {"multinode": 1}, "multinode"),
    ("/api/tasks/t/terminate", {"timeout_s": True}, "timeout_s"),
    ("/api/tasks/t/terminate", {"message": "m" * 4097}, "message"),
]


@pytest.mark.parametrize(("path", "body", "field"), NOT_NUMBERS, ids=[f for *_, f in NOT_NUMBERS])
async def test_booleans_are_not_numbers(
    shim: Env, raw: httpx.AsyncClient, path: str, body: dict[str, Any], field: str
) -> None:
    if path == "/api/tasks":
        body = {"id": "b", "image": "img", **body}
    else:
        await shim.client.submit_task(TaskSpec(id="t", image="img"))
    r = await raw.post(path, json=body)
    assert r.status_code == 422 and field in fields(r), r.text


async def test_whole_floats_are_integers(raw: httpx.AsyncClient) -> None:
    # JSON Schema's "integer" includes 2.0: strict, but not stricter than the schema.
    body = {"id": "w", "image": "img", "accelerators": 2.0, "memory_bytes": 1024.0}
    r = await raw.post("/api/tasks", json=body)
    assert r.status_code == 201 and r.json()["accelerators"] == [0, 1], r.text
    r = await raw.post("/api/tasks", json={"id": "h", "image": "img", "accelerators": 1.5})
    assert r.status_code == 422 and fields(r) == {"accelerators"}


async def test_infinite_and_nan_numbers_are_refused(raw: httpx.AsyncClient) -> None:
    # Python's json reads these literals; the schema must not let them through.
    for text in ('{"id": "n", "cpus": Infinity}', '{"id": "n", "cpus": NaN}'):
        r = await raw.post("/api/tasks", content=text, headers={"content-type": "application/json"})
        assert r.status_code == 422 and fields(r) == {"cpus"}
    r = await raw.post(
        "/api/tasks/n/terminate",
        content='{"timeout_s": Infinity}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422 and fields(r) == {"timeout_s"}


# -- every answer in the error shape; OpenAPI tells the truth -----------------------------------
async def test_http_errors_have_the_error_shape(raw: httpx.AsyncClient) -> None:
    r = await raw.get("/api/nope")
    assert r.status_code == 404 and r.json()["error"] == "not_found" and r.json()["detail"]
    r = await raw.put("/api/tasks")
    assert r.status_code == 405 and r.json()["error"] == "method_not_allowed"
    assert r.headers["allow"] == "GET, POST"  # every method the path serves
    r = await raw.post(
        "/api/tasks", content=b"{\xc3\x28}", headers={"content-type": "application/json"}
    )
    assert r.status_code == 422 and r.json()["error"] == "bad_request"  # not UTF-8
    r = await raw.post("/api/tasks", content=b"{not json", headers={"content-type": "x/y"})
    assert r.status_code == 422 and r.json()["error"] == "invalid_request"


async def test_openapi_and_docs_need_the_token(shim: Env) -> None:
    async with httpx.AsyncClient(transport=shim.app, base_url="http://shim") as anon:
        for path in ("/openapi.json", "/docs", "/redoc", "/nope"):
            r = await anon.get(path)
            assert r.status_code == 401, path
            assert r.headers["www-authenticate"] == "Bearer"
            assert r.json()["error"] == "unauthorized"
        r = await anon.get("/openapi.json", headers=AUTH)
        assert r.status_code == 200
    schema = r.json()
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            assert "401" in op["responses"], (method, path)
            assert op["security"] == [{"HTTPBearer": []}], (method, path)
    assert schema["paths"]["/api/tasks"]["post"]["requestBody"]["required"] is True
    task_id = schema["paths"]["/api/tasks/{task_id}"]["delete"]["parameters"][0]["schema"]
    assert task_id["pattern"] == "^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
    spec = schema["components"]["schemas"]["TaskSpec"]["properties"]
    assert spec["memory_bytes"]["anyOf"][0] == {
        "type": "integer",
        "exclusiveMinimum": 0,
        "maximum": 2**53,
    }  # bounds as JSON Schema keywords, not pydantic's "gt"/"le"


# -- slow disk work off the event loop ----------------------------------------------------------
async def test_task_dir_is_deleted_off_the_event_loop(
    shim: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    await shim.client.submit_task(TaskSpec(id="big", image="img"))
    await shim.client.terminate_task("big")
    tasks_dir = shim.state_dir / "tasks"
    entered, release = threading.Event(), threading.Event()
    stuck: list[str] = []
    real_rmtree = shutil.rmtree

    def slow_rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
        if Path(path).parent == tasks_dir:  # the task dir (or its trash name)
            entered.set()
            # A guard, not a timing assertion: if this ran on the loop, the test could never
            # set `release`; after the guard the test fails on `stuck` instead of hanging.
            if not release.wait(30):
                stuck.append(str(path))
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", slow_rmtree)
    delete = asyncio.create_task(shim.client.remove_task("big"))
    assert await asyncio.to_thread(entered.wait, 30)
    # The delete is blocked inside rmtree; the shim still answers.
    assert (await shim.client.healthcheck()).service == "tcl-shim"
    assert [t.id for t in await shim.client.list_tasks()] == []
    assert not delete.done() and not stuck
    release.set()
    await delete
    assert not stuck
    assert [p.name for p in tasks_dir.iterdir()] == []  # no trash left behind


async def test_finish_writes_in_a_thread(shim: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    await shim.client.submit_task(TaskSpec(id="f", image="img", accelerators=1))
    await wait_status(shim.client, "f", TaskStatus.RUNNING)
    writers: list[int] = []
    real_update = shim.service.store.update

    def update(task_id: str, **changes: Any) -> Any:
        writers.append(threading.get_ident())
        return real_update(task_id, **changes)

    monkeypatch.setattr(shim.service.store, "update", update)
    info = await shim.service.finish("f", TerminationReason.FAILED, "boom")
    assert info.status is TaskStatus.TERMINATED
    assert writers and threading.get_ident() not in writers
    assert (await shim.client.host()).accelerators[0].task_id is None  # released after
