"""``tcl ui``'s API as the page uses it: auth, Host refusal, runs, metrics, matrices, hosts,
actions (403 read-only), static files."""

from __future__ import annotations

import time

import pytest

from tcl.control.runrequest import RunRequest
from tcl.control.service import HostStatus
from tcl.control.states import RunState
from tcl.control.store import RunRow
from tcl.control.sweep.queue import NewEntry, SweepQueue
from tcl.shim.api import Accelerator, HostInfo
from tcl.ui.hosts import host_item
from tests.integration.ui.conftest import AUTH, PAGE, TOKEN, MakeClient, Seeded, TestClient

pytestmark = pytest.mark.integration


# auth and Host ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/api/info",
        "/api/runs",
        "/api/matrices",
        "/static/app.js",
        "/static/vendor/uplot/uPlot.iife.min.js",
    ],
)
def test_every_path_needs_the_token(make_client: MakeClient, path: str) -> None:
    anon = make_client()
    assert anon.get(path).status_code == 401
    wrong = make_client(headers={"Authorization": "Bearer " + "x" * 43})
    assert wrong.get(path).status_code == 401
    assert make_client(headers=AUTH).get(path).status_code == 200


def test_wrong_query_token_is_refused(make_client: MakeClient) -> None:
    anon = make_client()
    r = anon.get("/?token=" + "y" * 43)
    assert r.status_code == 401
    assert "set-cookie" not in r.headers


def test_cookie_from_first_page_load(make_client: MakeClient) -> None:
    browser = make_client()
    r = browser.get(f"/?token={TOKEN}")
    assert r.status_code == 200
    assert 'id="nav-runs"' in r.text
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and TOKEN.lower() in cookie
    assert r.headers["referrer-policy"] == "no-referrer"
    # the cookie alone carries the next requests
    assert browser.get("/api/info").json() == {"version": "0.1.0", "allow_actions": False}
    assert browser.get("/static/app.js").status_code == 200
    browser.cookies.clear()
    assert browser.get("/api/info").status_code == 401


@pytest.mark.parametrize("base", ["http://evil.example:8765", "http://127.0.0.1.nip.io:8765"])
def test_foreign_host_header_is_refused(make_client: MakeClient, base: str) -> None:
    c = make_client(base_url=base, headers=AUTH)
    r = c.get("/api/info")
    assert r.status_code == 421
    assert "127.0.0.1" in r.json()["detail"]


def test_localhost_is_accepted(make_client: MakeClient) -> None:
    assert make_client(base_url="http://localhost:9", headers=AUTH).get("/api/info").is_success


def test_cross_site_post_is_refused(make_client: MakeClient) -> None:
    c = make_client(allow_actions=True, headers={**AUTH, "Origin": "http://evil.example"})
    assert c.post("/api/runs/wait-run/stop").status_code == 403


# runs -------------------------------------------------------------------------------------


def test_runs_list_filter_search_limit(client: TestClient) -> None:
    body = client.get("/api/runs").json()
    assert body["total"] == 4
    by_id = {r["run_id"]: r for r in body["runs"]}
    assert [r["run_id"] for r in body["runs"]] == ["wait-run", "live-run", "bad-run", "ok-run"]
    ok = by_id["ok-run"]
    assert (ok["state"], ok["host"], ok["backend"], ok["chips"], ok["chip"]) == (
        "succeeded",
        "here",
        "local",
        2,
        "h100",
    )
    assert ok["command"] == "python train.py --lr 0.1" and ok["exit_code"] == 0
    assert ok["age_s"] >= 0 and not ok["live"]
    assert by_id["wait-run"]["command"] == "job lm1b" and by_id["wait-run"]["live"]
    assert by_id["bad-run"]["message"] == "exit code 3"

    failed = client.get("/api/runs", params={"state": "failed"}).json()
    assert [r["run_id"] for r in failed["runs"]] == ["bad-run"] and failed["total"] == 1
    for q, want in (
        ("TRAIN.PY", ["ok-run"]),
        ("farbox", ["bad-run"]),
        ("eval-big", ["bad-run"]),
        ("live-", ["live-run"]),
        ("train", ["live-run", "ok-run"]),
        ("--lr 0.1", ["ok-run"]),
        ("nothing-like-it", []),
    ):
        got = client.get("/api/runs", params={"q": q}).json()
        assert [r["run_id"] for r in got["runs"]] == want, q
        assert got["total"] == len(want)
    page = client.get("/api/runs", params={"limit": 2, "offset": 1}).json()
    assert [r["run_id"] for r in page["runs"]] == ["live-run", "bad-run"] and page["total"] == 4
    page = client.get("/api/runs", params={"q": "run", "limit": 1, "offset": 3}).json()
    assert [r["run_id"] for r in page["runs"]] == ["ok-run"] and page["total"] == 4
    past = client.get("/api/runs", params={"offset": 10}).json()
    assert (past["runs"], past["total"]) == ([], 4)
    both = client.get("/api/runs", params={"state": "running", "q": "train"}).json()
    assert [r["run_id"] for r in both["runs"]] == ["live-run"] and both["total"] == 1
    assert client.get("/api/runs", params={"state": "bogus"}).status_code == 422


def test_runs_list_holds_2000_runs_and_finds_one(  # speed: bench/ui_load.py
    seeded: Seeded, client: TestClient
) -> None:
    now = time.time()
    with seeded.store.session() as s:
        s.add_all(
            RunRow(
                id=f"bulk-{i:04d}",
                name=f"sweep-{i}",
                state=RunState.SUCCEEDED.value,
                host="here",
                backend="local",
                request={"argv": ["python", "t.py", str(i)]},
                message="",
                created_at=now - i,
                updated_at=now,
            )
            for i in range(2000)
        )
    body = client.get("/api/runs", params={"limit": 5000}).json()
    assert body["total"] == 2004 and len(body["runs"]) == 2004
    assert [
        r["run_id"] for r in client.get("/api/runs", params={"q": "t.py 1999"}).json()["runs"]
    ] == ["bulk-1999"]


def test_run_detail_and_404(client: TestClient) -> None:
    d = client.get("/api/runs/bad-run").json()
    assert d["run"]["state"] == "failed"
    # the stored request as the store keeps it: every field, defaults included, and its version
    assert d["request"] == RunRequest(argv=["python", "eval.py"], chips=1).model_dump(mode="json")
    assert d["request"]["version"] == 1 and d["request"]["argv"] == ["python", "eval.py"]
    assert [(a["attempt"], a["host"], a["state"], a["cause"]) for a in d["attempts"]] == [
        (0, "farbox", "terminated", "preempted"),
        (1, "farbox", "failed", "exit"),
    ]
    assert all(a["created_at"] > 0 for a in d["attempts"]) and d["nodes"] == 1
    # no phase kept: no start to show, no goodput
    assert [a["start"] for a in d["attempts"]] == [[], []] and d["goodput"] is None
    ok = client.get("/api/runs/ok-run").json()
    (att,) = ok["attempts"]
    assert [(g["phase"], g["seconds"]) for g in att["start"]][1:] == [
        ("runner_ready", 0.5),
        ("job_started", 0.25),
        ("compiled", 2.25),
        ("first_step", 0.25),
    ]
    assert att["to_first_step_s"] == pytest.approx(sum(g["seconds"] for g in att["start"]))
    assert 0 < ok["goodput"] <= 1
    r = client.get("/api/runs/no-such-run")
    assert r.status_code == 404 and "no-such-run" in r.json()["detail"]


def test_metrics_paging_with_after(client: TestClient) -> None:
    page = client.get("/api/runs/ok-run/metrics").json()
    seqs = [p["seq"] for p in page["points"]]  # the points' places in the store: increasing
    assert len(seqs) == 4 and seqs == sorted(set(seqs))
    assert page["next"] == seqs[-1] and not page["more"]
    assert page["points"][2] == {
        "seq": seqs[2],
        "step": 2,
        "kind": "val",
        "node": 0,
        "ts": 1004.0,
        "values": {"val_loss": 1.7},
    }
    page = client.get("/api/runs/ok-run/metrics", params={"after": seqs[1], "limit": 1}).json()
    assert [p["seq"] for p in page["points"]] == [seqs[2]]
    assert page["next"] == seqs[2] and page["more"]
    page = client.get("/api/runs/ok-run/metrics", params={"after": seqs[-1]}).json()
    assert page == {"points": [], "next": seqs[-1], "more": False}
    assert client.get("/api/runs/nope/metrics").status_code == 404


# actions ----------------------------------------------------------------------------------


def test_stop_is_refused_read_only(client: TestClient, seeded: Seeded) -> None:
    r = client.post("/api/runs/wait-run/stop")
    assert r.status_code == 403 and "--allow-actions" in r.json()["detail"]
    assert seeded.store.get_run("wait-run").state is RunState.PENDING


def test_stop_with_actions(make_client: MakeClient, seeded: Seeded) -> None:
    c = make_client(allow_actions=True, headers=PAGE)
    assert c.get("/api/info").json()["allow_actions"] is True
    r = c.post("/api/runs/wait-run/stop")
    assert r.status_code == 200, r.text
    assert r.json()["run"]["state"] == "terminated" and not r.json()["run"]["live"]
    assert seeded.store.get_run("wait-run").state is RunState.TERMINATED
    assert c.post("/api/runs/nope/stop").status_code == 404


# matrices ---------------------------------------------------------------------------------


def test_matrices_list_and_detail(client: TestClient) -> None:
    (m,) = client.get("/api/matrices").json()
    assert m["id"] == "sweep" and m["total"] == 6
    assert m["counts"] == {
        "queued": 1,
        "claimed": 0,
        "running": 1,
        "done": 2,
        "failed": 2,
        "cancelled": 0,
    }
    d = client.get("/api/matrices/sweep").json()
    assert d["counts"] == m["counts"] and d["total"] == 6
    assert [(e["index"], e["job_id"], e["state"]) for e in d["entries"]] == [
        (0, "j0", "done"),
        (1, "j1", "done"),
        (2, "j2", "failed"),
        (3, "j3", "failed"),
        (4, "j4", "running"),
        (5, "j5", "queued"),
    ]
    assert d["entries"][2]["error"] == "ValueError: nan loss"
    assert d["entries"][3]["params"] == {"lr": pytest.approx(0.3)}
    assert all(e["run_id"] for e in d["entries"])
    assert {f["job_id"] for f in d["failures"]} == {"j2", "j3"}
    assert d["eta_s"] is not None and d["eta_s"] >= 0
    assert client.get("/api/matrices/nope").status_code == 404


def test_matrix_detail_holds_1200_entries(  # speed: bench/ui_load.py
    seeded: Seeded, client: TestClient
) -> None:
    q = SweepQueue(seeded.store)
    q.add("big", {"argv": ["true"]}, [NewEntry(f"e{i}", {"i": i, "lr": 1e-4}) for i in range(1200)])
    q.close()
    assert len(client.get("/api/matrices/big").json()["entries"]) == 1200


def test_requeue_read_only_then_with_actions(make_client: MakeClient, seeded: Seeded) -> None:
    ro = make_client(headers=PAGE)
    r = ro.post("/api/matrices/sweep/requeue")
    assert r.status_code == 403 and "--allow-actions" in r.json()["detail"]
    assert ro.get("/api/matrices/sweep").json()["counts"]["failed"] == 2
    calls: list[int] = []

    def scheduler() -> str:
        calls.append(1)
        return "tcl serve (pid 1) schedules them"

    rw = make_client(allow_actions=True, start_scheduler=scheduler, headers=PAGE)
    before = {e["job_id"]: e["run_id"] for e in rw.get("/api/matrices/sweep").json()["entries"]}
    r = rw.post("/api/matrices/sweep/requeue")
    assert r.status_code == 200, r.text
    assert r.json() == {"requeued": 2, "scheduler": "tcl serve (pid 1) schedules them"}
    assert calls == [1]
    d = rw.get("/api/matrices/sweep").json()
    assert d["counts"]["failed"] == 0 and d["counts"]["queued"] == 3
    after = {e["job_id"]: e["run_id"] for e in d["entries"]}
    assert after["j2"] != before["j2"] and after["j0"] == before["j0"]  # new runs for requeued
    assert rw.post("/api/matrices/sweep/requeue").json()["requeued"] == 0
    assert rw.post("/api/matrices/nope/requeue").status_code == 404


# hosts ------------------------------------------------------------------------------------


def test_hosts_unreachable_answers_an_error_not_a_hang(client: TestClient) -> None:
    """deadbox accepts TCP and never speaks (its SSH connect would wait 60 s): the page gets
    an error string once the UI's 1 s per host is up."""
    t0 = time.monotonic()
    r = client.get("/api/hosts")
    took = time.monotonic() - t0
    assert r.status_code == 200, r.text
    (dead,) = r.json()["hosts"]
    assert took < 30, f"{took:.1f} s"  # not the 60 s its SSH connect would wait
    assert dead["name"] == "deadbox" and dead["type"] == "ssh"
    assert dead["reachable"] is False and dead["accelerators"] == []
    assert dead["detail"] == "no answer within 1 s"


def test_host_item_counts_free_and_busy() -> None:
    info = HostInfo(
        hostname="box",
        cpus=8,
        memory_bytes=1,
        executors=[],
        accelerators=[
            Accelerator(index=0, chip="h100", vendor="fake"),
            Accelerator(index=1, chip="h100", vendor="fake", task_id="t1"),
            Accelerator(index=2, chip="h100", vendor="fake", busy_outside=True),
        ],
    )
    item = host_item(HostStatus("box", "ssh", "box.lan", True, "3 x h100", info))
    assert (item.free, item.busy) == (1, 2)
    assert [(a.index, a.free, a.task_id) for a in item.accelerators] == [
        (0, True, None),
        (1, False, "t1"),
        (2, False, None),
    ]


# static -----------------------------------------------------------------------------------


def test_static_files_and_vendored_uplot(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for path in ("app.js", "app.css", "vendor/uplot/uPlot.min.css"):
        assert client.get(f"/static/{path}").status_code == 200, path
    js = client.get("/static/vendor/uplot/uPlot.iife.min.js")
    assert js.status_code == 200 and "uPlot" in js.text
    assert "javascript" in js.headers["content-type"]
    lic = client.get("/static/vendor/uplot/LICENSE")
    assert lic.status_code == 200 and "MIT" in lic.text
    assert client.get("/static/../app.py").status_code == 404
