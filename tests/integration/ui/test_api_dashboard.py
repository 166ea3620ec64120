"""What the dashboard's views read besides the raw runs: a count per state (the summary bar),
running and failed runs first, each run's duration, nodes and GPUs, cause and last error line,
a matrix's manifest fields, and the log socket's word that what is kept has been sent."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update
from starlette.websockets import WebSocketDisconnect

from tcl.control.runrequest import RunRequest
from tcl.control.states import AttemptCause, RunState
from tcl.control.store import RunRow
from tcl.control.store.tables import AttemptRow
from tcl.control.sweep.queue import NewEntry, SweepQueue
from tests.integration.ui.conftest import Seeded, TestClient

pytestmark = pytest.mark.integration
WS = "ws://127.0.0.1:8765"
TWO_GPU_NODES = {
    "nodes": [
        {"host": "gpu-a", "task_id": "t-1", "accelerators": [0, 1]},
        {"host": "gpu-b", "task_id": "t-2", "accelerators": [2, 3]},
    ]
}


def _ids(body: dict[str, Any]) -> list[str]:
    return [r["run_id"] for r in body["runs"]]


def test_runs_list_counts_every_state(client: TestClient) -> None:
    counts = client.get("/api/runs", params={"state": "failed", "limit": 1}).json()["counts"]
    assert counts == {  # the whole store's, whatever the page's filter
        "pending": 1,
        "queued": 0,
        "provisioning": 0,
        "running": 1,
        "succeeded": 1,
        "failed": 1,
        "terminated": 0,
        "waiting_retry": 0,
    }


def test_attention_order_puts_running_then_failed_runs_first(client: TestClient) -> None:
    def ids(**params: str | int) -> list[str]:
        return _ids(client.get("/api/runs", params={"order": "attention", **params}).json())

    assert ids() == ["live-run", "bad-run", "wait-run", "ok-run"]
    assert ids(limit=2, offset=1) == ["bad-run", "wait-run"]
    assert ids(q="train") == ["live-run", "ok-run"]
    assert ids(state="pending") == ["wait-run"]
    assert _ids(client.get("/api/runs").json()) == ["wait-run", "live-run", "bad-run", "ok-run"]
    assert client.get("/api/runs", params={"order": "bogus"}).status_code == 422


def _gpu_run(seeded: Seeded, run_id: str, state: RunState, message: str, code: int | None) -> None:
    store = seeded.store
    store.create_run(run_id, "train-gpu", RunRequest(argv=["python", "t.py"], chips=2, chip="h100"))
    store.set_placement(run_id, "gpu-a", "ssh", None)
    store.add_attempt(run_id, "gpu-a", "ssh", TWO_GPU_NODES)
    for st in (RunState.PROVISIONING, RunState.RUNNING):
        store.set_state(run_id, st)
    if state.is_final:
        cause = AttemptCause.STOPPED if state is RunState.TERMINATED else AttemptCause.EXIT
        store.set_state(run_id, state, exit_code=code, message=message, attempt=0, cause=cause)
    store.update_attempt(run_id, 0, pid=4242)  # as its runner reported it
    ended = 1100.0 if state.is_final else None
    with store.session() as s:  # placed at 990, its job started at 1000, ended at 1100: 100 s
        times = {"created_at": 990.0, "started_at": 1000.0, "ended_at": ended}
        s.execute(update(AttemptRow).where(AttemptRow.run_id == run_id).values(**times))
        s.execute(update(RunRow).where(RunRow.id == run_id).values(updated_at=1100.0))


def test_run_items_carry_duration_nodes_cause_and_error(seeded: Seeded, client: TestClient) -> None:
    oom = "RuntimeError: CUDA out of memory"
    _gpu_run(seeded, "oom-run", RunState.FAILED, f"exit code 3: {oom}", 3)
    _gpu_run(seeded, "fine-run", RunState.SUCCEEDED, "exit code 0", 0)
    _gpu_run(seeded, "stopped-run", RunState.TERMINATED, "stopped by tcl stop", None)
    _gpu_run(seeded, "going-run", RunState.RUNNING, "", None)
    runs = {r["run_id"]: r for r in client.get("/api/runs").json()["runs"]}
    nodes = [
        {"host": "gpu-a", "task": "t-1", "accelerators": [0, 1]},
        {"host": "gpu-b", "task": "t-2", "accelerators": [2, 3]},
    ]

    oom_run = runs["oom-run"]
    assert (oom_run["cause"], oom_run["error"]) == ("exit 3", oom)
    assert oom_run["nodes"] == nodes and oom_run["duration_s"] == pytest.approx(100.0)
    fine = runs["fine-run"]
    assert (fine["cause"], fine["error"], fine["duration_s"]) == ("", "", pytest.approx(100.0))
    stopped = runs["stopped-run"]
    assert (stopped["cause"], stopped["error"]) == ("stopped", "stopped by tcl stop")
    going = runs["going-run"]  # live: its duration runs up to now
    assert going["duration_s"] > 1e9 and (going["cause"], going["error"]) == ("", "")
    bad = runs["bad-run"]  # a code and no line of the job's
    assert (bad["cause"], bad["error"]) == ("exit 3", "")
    never = runs["wait-run"]  # never placed
    assert (never["duration_s"], never["nodes"], never["cause"]) == (None, [], "")

    detail = client.get("/api/runs/oom-run").json()
    assert detail["run"]["nodes"] == nodes and detail["attempts"][0]["nodes"] == nodes
    # each attempt: its job's pid and how long it ran (issue 31)
    [att] = detail["attempts"]
    assert (att["pid"], att["started_at"], att["ended_at"]) == (4242, 1000.0, 1100.0)
    assert att["duration_s"] == pytest.approx(100.0)


def test_matrix_detail_names_its_manifest_fields(seeded: Seeded, client: TestClient) -> None:
    assert client.get("/api/matrices/sweep").json()["fields"] == ["lr"]
    q = SweepQueue(seeded.store)
    q.add(
        "mixed",
        {"argv": ["true"]},
        [
            NewEntry("a", {"method": "fft", "lang": "en"}),
            NewEntry("b", {"method": "conv", "run_kind": "train", "lang": "de"}),
        ],
    )
    q.close()
    assert client.get("/api/matrices/mixed").json()["fields"] == ["method", "lang", "run_kind"]


def test_log_socket_says_when_what_is_kept_was_sent(client: TestClient) -> None:
    """``caught_up``: what is kept has been sent (the page can say "no output yet" then)."""
    for after, kept in ((0, [1, 3, 4]), (3, [4]), (4, [])):
        msgs: list[dict[str, Any]] = []
        with (
            client.websocket_connect(f"{WS}/api/runs/ok-run/logs?after={after}") as ws,
            pytest.raises(WebSocketDisconnect),
        ):
            while True:
                msgs.append(ws.receive_json())
        assert [m.get("seq") for m in msgs[: len(kept)]] == kept
        assert msgs[len(kept) :] == [{"caught_up": 4}, {"end": "succeeded", "exit_code": 0}]
