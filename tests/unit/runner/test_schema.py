"""The wire schema refuses what the runner could not run (422 naming the field), every error has
the ``{error, detail}`` shape, and the generated OpenAPI says what the app does."""

from __future__ import annotations

from typing import Any

import pytest

from tcl.runner.client import RunnerClient
from tcl.runner.openapi import openapi

OK = {"run_id": "r", "argv": ["true"]}


async def refused(client: RunnerClient, path: str, body: dict[str, Any]) -> list[str]:
    """POST ``body``; assert a 422 ``{error, detail}``; return the fields it names."""
    r = await client._http.post(path, json=body)
    assert r.status_code == 422, r.text
    assert set(r.json()) == {"error", "detail"}
    return [d["field"] for d in r.json()["detail"]]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"argv": ["python", "a\0b"]}, "argv.1"),
        ({"env": {"A": "x\0y"}}, "env.A"),
        ({"env": {"A=B": "x"}}, "env.A=B.[key]"),
        ({"env": {"": "x"}}, "env..[key]"),
        ({"secrets": {"T=K": "x"}}, "secrets.T=K.[key]"),
        ({"secrets": {"TOK": "hun\0ter2"}}, "secrets.TOK"),
        ({"working_dir": "/tmp/w\0rk"}, "working_dir"),
        ({"cwd": "../x"}, "cwd"),
        ({"cwd": "a/../../x"}, "cwd"),
        ({"cwd": "/etc"}, "cwd"),
        ({"cwd": "s\0b"}, "cwd"),
        ({"name": "n\0"}, "name"),
        ({"job": {"key": "k\0"}}, "job.key"),
    ],
)
async def test_what_exec_cannot_take_is_refused_at_submit(
    client: RunnerClient, change: dict[str, Any], field: str
) -> None:
    assert await refused(client, "/api/submit", {**OK, **change}) == [field]
    assert (await client.healthcheck()).state == "waiting_spec"


async def test_a_refused_secret_is_not_echoed(client: RunnerClient) -> None:
    r = await client._http.post("/api/submit", json={**OK, "secrets": {"TOK": "hun\0ter2"}})
    assert r.status_code == 422 and "hun" not in r.text


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"argv": []}, "argv"),
        ({"attempt": True}, "attempt"),
        ({"max_duration_s": True}, "max_duration_s"),
        ({"max_duration_s": 1e10}, "max_duration_s"),
        ({"cluster": {"nodes": True}}, "cluster.nodes"),
        ({"code": {"sha256": "0" * 64, "size": True}}, "code.size"),
        ({"run_id": "."}, "run_id"),
        ({"run_id": ".."}, "run_id"),
    ],
)
async def test_spec_bounds_and_types(
    client: RunnerClient, change: dict[str, Any], field: str
) -> None:
    assert await refused(client, "/api/submit", {**OK, **change}) == [field]


async def test_numbers_still_take_integers(client: RunnerClient) -> None:
    body = {**OK, "attempt": 2, "max_duration_s": 60, "run_id": "a.b-c_1"}
    assert (await client._http.post("/api/submit", json=body)).status_code == 200
    assert (await client._http.post("/api/stop", json={"grace_s": 1})).status_code == 200


@pytest.mark.parametrize("grace", [True, 1e10, -1])
async def test_stop_grace_is_a_bounded_number(client: RunnerClient, grace: object) -> None:
    assert await refused(client, "/api/stop", {"grace_s": grace}) == ["grace_s"]


async def test_query_numbers_are_not_booleans(client: RunnerClient) -> None:
    for name in ("wait", "after", "limit"):
        r = await client._http.get("/api/events", params={name: "true"})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == f"query.{name}"
    assert (await client._http.get("/api/events", params={"after": "0", "wait": "0"})).is_success


async def test_unknown_route_and_wrong_method_answer_error_bodies(client: RunnerClient) -> None:
    r = await client._http.get("/api/nosuch")
    assert r.status_code == 404
    assert r.json() == {"error": "not_found", "detail": "Not Found"}
    r = await client._http.delete("/api/run")
    assert r.status_code == 405
    assert r.json()["error"] == "method_not_allowed" and "detail" in r.json()
    assert r.headers["allow"] == "POST"


def test_openapi_marks_required_bodies_and_documents_auth() -> None:
    spec = openapi()
    ops = {(m, p): op for p, item in spec["paths"].items() for m, op in item.items()}
    assert ops["post", "/api/submit"]["requestBody"]["required"] is True
    assert ops["post", "/api/code/cached"]["requestBody"]["required"] is True
    assert ops["post", "/api/stop"]["requestBody"]["required"] is False  # {} is a valid stop
    assert spec["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert spec["security"] == [{"bearerAuth": []}]
    for (_, path), op in ops.items():
        if path == "/api/healthcheck":
            assert op["security"] == [] and "401" not in op["responses"]
        else:
            error = op["responses"]["401"]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/ErrorBody"}, path
    argv = spec["components"]["schemas"]["JobSpec"]["properties"]["argv"]
    assert {"type": "array", "minItems": 1}.items() <= argv["anyOf"][0].items()
