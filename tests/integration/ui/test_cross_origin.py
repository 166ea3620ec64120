"""Requests that a page on another origin can make a browser send, with the token cookie that
SameSite does not hold back (it ignores ports): another loopback port, ``localhost`` for
``127.0.0.1``, https, ``null``. State changes and the log WebSocket need the UI's own
``Origin``; state changes also need the ``X-Tcl-UI`` header (no cross-origin request can add
it without a CORS preflight, which the UI never grants). Driven in-process (TestClient); the
same attacks from a real browser are in ``test_cross_origin_browser.py``."""

from __future__ import annotations

import pytest
from starlette.websockets import WebSocketDisconnect

from tcl.control.states import RunState
from tests.integration.ui.conftest import (
    AUTH,
    BASE,
    PAGE,
    TOKEN,
    MakeClient,
    Seeded,
    TestClient,
)

pytestmark = pytest.mark.integration

WS = "ws://127.0.0.1:8765"
ACTION = {"X-Tcl-UI": "1"}
FOREIGN = [
    "http://127.0.0.1:8888",  # another user's server, a dev server, a forwarded Jupyter
    "http://127.0.0.1",  # port 80
    "http://localhost:8765",  # another origin (and site) than the 127.0.0.1 the page is on
    "https://127.0.0.1:8765",
    "http://127.0.0.1:8765.evil.example",
    "null",  # a sandboxed frame, a file:// page
]
ACTIONS = ["/api/runs/wait-run/stop", "/api/matrices/sweep/requeue"]


def _unchanged(seeded: Seeded, client: TestClient) -> None:
    assert seeded.store.get_run("wait-run").state is RunState.PENDING
    assert client.get("/api/matrices/sweep").json()["counts"]["failed"] == 2


@pytest.mark.parametrize("origin", FOREIGN)
@pytest.mark.parametrize("path", ACTIONS)
def test_a_state_change_from_another_origin_is_refused(
    make_client: MakeClient, seeded: Seeded, origin: str, path: str
) -> None:
    c = make_client(allow_actions=True, headers={**AUTH, **ACTION, "Origin": origin})
    r = c.post(path)
    assert r.status_code == 403, r.text
    assert r.json()["error"] == "forbidden" and "Origin" in r.json()["detail"]
    _unchanged(seeded, c)


@pytest.mark.parametrize("path", ACTIONS)
def test_a_state_change_without_an_origin_is_refused(
    make_client: MakeClient, seeded: Seeded, path: str
) -> None:
    c = make_client(allow_actions=True, headers={**AUTH, **ACTION})
    r = c.post(path)
    assert r.status_code == 403 and "Origin" in r.json()["detail"]
    _unchanged(seeded, c)
    assert c.post(path, headers={"Origin": BASE}).status_code == 200  # the page's own request


@pytest.mark.parametrize("base", [BASE, "http://localhost:8765"])
@pytest.mark.parametrize("path", ACTIONS)
def test_a_state_change_without_the_header_is_refused(
    make_client: MakeClient, seeded: Seeded, base: str, path: str
) -> None:
    """What a form or a no-cors fetch can send: an Origin, the cookie, no header. Here even
    the right Origin (the page opened as 127.0.0.1 or as localhost) is not enough."""
    browser = make_client(allow_actions=True, base_url=base, headers={"Origin": base})
    assert browser.get(f"/?token={TOKEN}").status_code == 200  # the cookie
    r = browser.post(path)
    assert r.status_code == 403 and "X-Tcl-UI" in r.json()["detail"]
    _unchanged(seeded, browser)
    assert browser.post(path, headers=ACTION).status_code == 200  # the page's own request


@pytest.mark.parametrize("method", ["PUT", "PATCH", "DELETE"])
def test_every_state_changing_method_needs_origin_and_header(
    make_client: MakeClient, method: str
) -> None:
    """Refused by the guard before routing (a route added later with another method is
    covered too), not merely unrouted."""
    bare = make_client(allow_actions=True, headers={**AUTH, "Origin": BASE})
    r = bare.request(method, "/api/runs/wait-run/stop")
    assert r.status_code == 403 and "X-Tcl-UI" in r.json()["detail"]
    foreign = make_client(allow_actions=True, headers={**AUTH, **ACTION})
    r = foreign.request(method, "/api/runs/wait-run/stop", headers={"Origin": FOREIGN[0]})
    assert r.status_code == 403
    page = make_client(allow_actions=True, headers=PAGE)
    assert page.request(method, "/api/runs/wait-run/stop").status_code == 405  # no such route


@pytest.mark.parametrize("origin", [*FOREIGN, None])
def test_the_log_socket_refuses_other_origins(make_client: MakeClient, origin: str | None) -> None:
    headers = {**AUTH} if origin is None else {**AUTH, "Origin": origin}
    c = make_client(headers=headers)
    with (
        pytest.raises(WebSocketDisconnect) as closed,
        c.websocket_connect(f"{WS}/api/runs/ok-run/logs") as ws,
    ):
        ws.receive_json()  # the old guard let it in: the kept log lines came
    assert closed.value.code == 1008
    own = make_client(headers={**AUTH, "Origin": BASE})  # a WebSocket cannot add headers
    with own.websocket_connect(f"{WS}/api/runs/ok-run/logs") as ws:
        assert ws.receive_json()["data"] == "hello\n"


@pytest.mark.parametrize("site", ["same-site", "cross-site"])
def test_reads_that_a_browser_marks_as_from_another_origin_are_refused(
    make_client: MakeClient, site: str
) -> None:
    """Fetch metadata: a page on another port (same-site) or name (cross-site) may not even
    probe the API with no-cors reads; a link it shows still opens the dashboard."""
    c = make_client(headers=AUTH)
    fetch = {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "script"}
    assert c.get("/api/runs", headers=fetch).status_code == 403
    assert c.get("/static/app.js", headers=fetch).status_code == 403
    nav = {"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}
    assert c.get("/", headers=nav).status_code == 200
    own = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"}
    assert c.get("/api/runs", headers=own).status_code == 200
