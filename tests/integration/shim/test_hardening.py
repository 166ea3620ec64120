"""A real ``tcl-shim`` process against hostile requests: what the in-process tests cannot show
(percent-encoded paths as the server decodes them, a body the server never has to receive)."""

from __future__ import annotations

import socket

import httpx

from tests.integration.shim.conftest import ShimFactory
from tests.integration.shim.harness import TOKEN, Shim

AUTH = {"Authorization": f"Bearer {TOKEN}"}


def first_line_of_answer(shim: Shim, head: str) -> str:
    """Send only a request head (a body is announced, never sent) and read the status line.
    A shim that waited for the body would never answer: the socket timeout ends the test."""
    with socket.create_connection(("127.0.0.1", shim.port), timeout=30) as s:
        s.sendall(head.encode())
        answer = b""
        while b"\r\n" not in answer:
            chunk = s.recv(4096)
            if not chunk:
                break
            answer += chunk
    return answer.split(b"\r\n", 1)[0].decode()


async def test_announced_body_is_refused_before_it_is_sent(make_shim: ShimFactory) -> None:
    shim = await make_shim("--executor", "process", "--fake-accelerators", "h100:2")
    head = (
        "POST /api/tasks HTTP/1.1\r\nHost: shim\r\nContent-Type: application/json\r\n"
        "Content-Length: 200000000\r\n{auth}\r\n"
    )
    assert first_line_of_answer(shim, head.format(auth="")) == "HTTP/1.1 401 Unauthorized"
    authed = head.format(auth=f"Authorization: Bearer {TOKEN}\r\n")
    assert first_line_of_answer(shim, authed).startswith("HTTP/1.1 413 ")
    async with shim.client() as c:
        assert (await c.healthcheck()).service == "tcl-shim"


async def test_dot_dot_task_id_cannot_reach_the_state_dir(make_shim: ShimFactory) -> None:
    shim = await make_shim("--executor", "process", "--fake-accelerators", "h100:2")
    before = sorted(p.name for p in shim.state_dir.iterdir())
    async with httpx.AsyncClient(base_url=shim.url, headers=AUTH) as http:
        r = await http.post("/api/tasks", json={"id": "..", "executor": "process"})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "id"
        for method, path in [
            ("POST", "/api/tasks/%2E%2E/terminate"),
            ("DELETE", "/api/tasks/%2E%2E"),
            ("DELETE", "/api/tasks/%2e"),
        ]:
            r = await http.request(method, path)
            assert r.status_code == 422, (method, path, r.text)
            assert r.json()["detail"][0]["field"] == "task_id"
        r = await http.delete("/api/tasks/..%2F..")  # a slash is never part of an id
        assert r.status_code == 404 and r.json()["error"] == "not_found"
    async with httpx.AsyncClient(base_url=shim.url) as anon:
        for path in ("/openapi.json", "/docs"):
            r = await anon.get(path)
            assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    assert sorted(p.name for p in shim.state_dir.iterdir()) == before
    async with shim.client() as c:
        assert (await c.healthcheck()).service == "tcl-shim"
