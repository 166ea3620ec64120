"""``WS /api/runs/{id}/logs``: kept events first, metrics left out, ``{"end"}`` last; a viewer
that goes away takes its follow with it."""

from __future__ import annotations

import time
from typing import Any

import pytest
from starlette.websockets import WebSocketDisconnect

from tests.integration.ui.conftest import AUTH, PAGE, MakeClient, TestClient

pytestmark = pytest.mark.integration
WS = "ws://127.0.0.1:8765"  # the TestClient sends this Host (its default is refused)


def _all(client: TestClient, path: str) -> tuple[list[dict[str, Any]], int]:
    msgs: list[dict[str, Any]] = []
    with client.websocket_connect(WS + path) as ws, pytest.raises(WebSocketDisconnect) as closed:
        while True:
            msgs.append(ws.receive_json())
    return msgs, closed.value.code


def test_final_run_sends_kept_events_then_end(client: TestClient) -> None:
    msgs, code = _all(client, "/api/runs/ok-run/logs")
    assert code == 1000
    assert [(m.get("seq"), m.get("kind"), m.get("data")) for m in msgs[:-2]] == [
        (1, "log", "hello\n"),
        (3, "log", "<warn>\n"),
        (4, "state", None),
    ]
    assert msgs[-2] == {"caught_up": 4}  # what is kept was sent
    assert msgs[1]["stream"] == "stderr" and msgs[1]["node"] == 0 and msgs[1]["nodes"] == 1
    assert msgs[2]["state"] == "succeeded" and msgs[2]["exit_code"] == 0
    assert msgs[-1] == {"end": "succeeded", "exit_code": 0}


def test_after_resumes_past_the_cursor(client: TestClient) -> None:
    msgs, _ = _all(client, "/api/runs/ok-run/logs?after=3")
    assert [m.get("seq") for m in msgs] == [4, None, None]
    assert msgs[-1]["end"] == "succeeded"


def test_unknown_run_and_no_token_are_refused(make_client: MakeClient) -> None:
    ok = make_client(headers=PAGE)
    with (
        pytest.raises(WebSocketDisconnect) as closed,
        ok.websocket_connect(f"{WS}/api/runs/nope/logs"),
    ):
        pass
    assert closed.value.code == 4404
    anon = make_client()
    with (
        pytest.raises(WebSocketDisconnect) as closed,
        anon.websocket_connect(f"{WS}/api/runs/ok-run/logs"),
    ):
        pass
    assert closed.value.code == 1008
    cross = make_client(headers={**AUTH, "Origin": "http://evil.example"})
    with pytest.raises(WebSocketDisconnect), cross.websocket_connect(f"{WS}/api/runs/ok-run/logs"):
        pass


def test_viewer_leaving_cancels_its_follow(make_client: MakeClient) -> None:
    """wait-run is never placed: its follows wait; each viewer's ends when it closes, while
    the other's goes on."""
    first = make_client(headers=PAGE)
    app = first.app
    second = TestClient(app, base_url=str(first.base_url), headers=PAGE)
    ui = app.app.state.ui  # type: ignore[attr-defined]

    def viewers(n: int) -> int:
        deadline = time.monotonic() + 5
        while ui.viewers != n and time.monotonic() < deadline:
            time.sleep(0.05)
        return int(ui.viewers)

    # each viewer says goodbye and is seen gone before its context ends (the TestClient
    # cancels a handler still running at that point, which would test nothing)
    with first.websocket_connect(f"{WS}/api/runs/wait-run/logs") as one:
        with second, second.websocket_connect(f"{WS}/api/runs/wait-run/logs") as two:
            assert viewers(2) == 2
            assert ui.feeds.following == 1  # one follow for both: each pull would keep lines twice
            assert first.get("/api/info").status_code == 200  # the server still answers
            two.close()
            assert viewers(1) == 1
        one.close()
        assert viewers(0) == 0
    deadline = time.monotonic() + 5
    while ui.feeds.following and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ui.feeds.following == 0  # nobody watches: its follow was cancelled


def test_stop_while_watched_ends_the_stream(make_client: MakeClient) -> None:
    """The stop pauses the run's feed, and the feed started again reports the end."""
    client = make_client(allow_actions=True, headers=PAGE)
    ui = client.app.app.state.ui  # type: ignore[attr-defined]
    with client.websocket_connect(f"{WS}/api/runs/wait-run/logs") as ws:
        assert ws.receive_json() == {"caught_up": 0}  # nothing kept
        deadline = time.monotonic() + 5
        while not ui.feeds.following and time.monotonic() < deadline:
            time.sleep(0.05)
        r = client.post("/api/runs/wait-run/stop")
        assert r.status_code == 200 and r.json()["run"]["state"] == "terminated"
        assert ws.receive_json() == {"end": "terminated", "exit_code": None}
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
        assert closed.value.code == 1000


def test_no_follow_runs_while_a_stop_pulls(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two pulls of one run at once would keep its lines twice: the stop's pulls run alone."""
    import tcl.control.lifecycle.stop as stop_mod
    from tcl.control.states import RunState

    client = make_client(allow_actions=True, headers=PAGE)
    ui = client.app.app.state.ui  # type: ignore[attr-defined]
    seen: list[int] = []

    async def fake_stop(ctl: Any, run: Any, grace_s: float) -> Any:
        seen.append(ui.feeds.following)
        ctl.store.set_state(run.id, RunState.TERMINATED, message="stopped by user")
        return ctl.store.get_run(run.id)

    monkeypatch.setattr(stop_mod, "stop", fake_stop)
    with client.websocket_connect(f"{WS}/api/runs/wait-run/logs") as ws:
        assert ws.receive_json() == {"caught_up": 0}  # nothing kept
        deadline = time.monotonic() + 5
        while not ui.feeds.following and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ui.feeds.following == 1
        assert client.post("/api/runs/wait-run/stop").status_code == 200
        assert ws.receive_json()["end"] == "terminated"
    assert seen == [0]


def test_what_the_owner_keeps_while_a_viewer_catches_up_reaches_it(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's owner keeps an event just after the viewer read what was kept, before the
    feed's follow starts: the follow still hands it over (it went to no one)."""
    from tcl.control.logcache import LogCache
    from tcl.runner.api import Event, EventKind, LogStream

    read = LogCache.read

    def read_then_the_owner_keeps_one(self: LogCache, after: int = 0, kind: Any = None) -> Any:
        kept = list(read(self, after, kind))
        if self.path.stem == "ok-run" and self.last_seq() == 4:
            late = Event(seq=5, ts=9.0, kind=EventKind.LOG, stream=LogStream.STDOUT, data="late\n")
            self.append([late], 0, 0, 1, "node")
        return iter(kept)

    monkeypatch.setattr("tcl.ui.logstream.LogCache.read", read_then_the_owner_keeps_one)
    msgs, _ = _all(client, "/api/runs/ok-run/logs")
    assert [m.get("data") for m in msgs if m.get("kind") == "log"] == [
        "hello\n",
        "<warn>\n",
        "late\n",
    ]
