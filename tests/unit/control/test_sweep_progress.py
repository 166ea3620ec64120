"""A matrix's summary (counts, rate, ETA, failures) and its matrix_status.json export, read from
a real SQLite store whose entries went through the queue's claim / started / finish API."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import event, update

from tcl.control.errors import SweepError
from tcl.control.runrequest import RunRequest
from tcl.control.sweep.model import EntryState
from tcl.control.sweep.progress import export, iso, last_line, summary
from tcl.control.sweep.queue import NewEntry, SweepQueue
from tcl.control.sweep.tables import EntryRow

T0 = 1_780_000_000.0  # 2026-05-28T20:26:40Z
OWNER = "sched-1"


@pytest.fixture
def queue(sqlite_queue: SweepQueue) -> SweepQueue:
    return sqlite_queue


def _add(q: SweepQueue, n: int, name: str = "m") -> None:
    q.add(name, {"argv": ["true"]}, [NewEntry(f"j{i}", {"i": i}) for i in range(n)])


def _drive(q: SweepQueue, outcomes: dict[str, tuple[EntryState, str]]) -> None:
    """Claim every entry named in ``outcomes``, start it, and end it as told (RUNNING: left
    running)."""
    ids = {e.job_id: e.id for e in q.entries("m")}
    claimed = {e.id for e in q.claim(OWNER, 1000, 600, scheduler="pod-0")}
    for job_id, (state, error) in outcomes.items():
        assert ids[job_id] in claimed
        assert q.started(OWNER, ids[job_id])
        if state is not EntryState.RUNNING:
            assert q.finish(OWNER, ids[job_id], state, error)
    for job_id in set(ids) - set(outcomes):  # the rest back to the queue
        q.release(OWNER, ids[job_id], not_before=0.0)


def _times(q: SweepQueue, job_id: str, started: float | None, ended: float | None) -> None:
    """Set an entry's start and end as if the clock had been ``T0 + ...`` then."""
    with q.store.session() as s:
        s.execute(
            update(EntryRow)
            .where(EntryRow.matrix == "m", EntryRow.job_id == job_id)
            .values(started_at=started, ended_at=ended)
        )


@pytest.fixture
def half_done(queue: SweepQueue) -> SweepQueue:
    """10 entries: 3 done and 2 failed in the last half hour, 1 done 2 h ago, 1 running,
    3 queued; the first started 3 h ago."""
    _add(queue, 10)
    _drive(
        queue,
        {
            "j0": (EntryState.DONE, ""),
            "j1": (EntryState.DONE, ""),
            "j2": (EntryState.DONE, ""),
            "j3": (EntryState.FAILED, "Traceback (most recent call last):\n  ...\nOOM: 80 GiB\n\n"),
            "j4": (EntryState.FAILED, "exit code 1"),
            "j5": (EntryState.DONE, ""),
            "j6": (EntryState.RUNNING, ""),
        },
    )
    now = T0 + 3 * 3600
    for job_id, ago_min in (("j0", 30), ("j1", 20), ("j2", 10), ("j3", 25), ("j4", 5)):
        _times(queue, job_id, now - ago_min * 60 - 600, now - ago_min * 60)
    _times(queue, "j5", T0, now - 2 * 3600)
    _times(queue, "j6", now - 60, None)
    return queue


def test_summary_counts_rate_eta(half_done: SweepQueue) -> None:
    s = summary(half_done, "m", now=T0 + 3 * 3600)
    assert s.total == 10
    assert s.counts == {
        EntryState.QUEUED: 3,
        EntryState.CLAIMED: 0,
        EntryState.RUNNING: 1,
        EntryState.DONE: 4,
        EntryState.FAILED: 2,
        EntryState.CANCELLED: 0,
    }
    assert (s.ended, s.remaining, s.done_fraction) == (6, 4, 0.4)
    assert s.runs_per_hour == 5.0  # j0..j4 in the last hour; j5 two hours ago is not counted
    assert s.eta_s == pytest.approx(4 / 5 * 3600)


def test_failures_newest_first_with_their_last_line(half_done: SweepQueue) -> None:
    now = T0 + 3 * 3600
    s = summary(half_done, "m", now=now)
    assert [(f.job_id, f.error, f.ended_at) for f in s.failures] == [
        ("j4", "exit code 1", now - 300),
        ("j3", "OOM: 80 GiB", now - 1500),
    ]
    assert s.failures[0].run_id is not None and s.failures[0].run_id.startswith("m-j4-")


def test_a_young_sweep_is_measured_since_it_started(queue: SweepQueue) -> None:
    _add(queue, 4)
    _drive(queue, {"j0": (EntryState.DONE, ""), "j1": (EntryState.DONE, "")})
    now = T0 + 600
    _times(queue, "j0", T0, T0 + 300)
    _times(queue, "j1", T0 + 10, T0 + 590)
    s = summary(queue, "m", now=now)
    assert s.runs_per_hour == pytest.approx(12.0)  # 2 in 10 minutes, not 2 per hour
    assert s.eta_s == pytest.approx(2 / 12 * 3600)


def test_no_rate_no_eta_and_nothing_left_is_zero(queue: SweepQueue) -> None:
    _add(queue, 2)
    s = summary(queue, "m")
    assert (s.runs_per_hour, s.eta_s, s.failures) == (0.0, None, [])
    _drive(queue, {"j0": (EntryState.DONE, ""), "j1": (EntryState.FAILED, "")})
    s = summary(queue, "m")
    assert s.eta_s == 0.0 and s.failures[0].error == ""
    assert summary(queue, "m", now=T0 + 10**9).eta_s == 0.0


def test_at_most_twenty_failures(queue: SweepQueue) -> None:
    _add(queue, 25)
    _drive(queue, {f"j{i}": (EntryState.FAILED, f"boom {i}") for i in range(25)})
    for i in range(25):
        _times(queue, f"j{i}", T0, T0 + i)
    s = summary(queue, "m", now=T0 + 100)
    assert s.counts[EntryState.FAILED] == 25
    assert [f.job_id for f in s.failures] == [f"j{i}" for i in range(24, 4, -1)]


def test_summary_json_is_plain(half_done: SweepQueue) -> None:
    data = json.loads(json.dumps(summary(half_done, "m", now=T0 + 3 * 3600).to_json()))
    assert data["counts"]["done"] == 4 and data["total"] == 10
    assert data["failures"][0] == {
        "job_id": "j4",
        "run_id": data["failures"][0]["run_id"],
        "ended_at": iso(T0 + 3 * 3600 - 300),
        "error": "exit code 1",
    }


def test_unknown_matrix(queue: SweepQueue) -> None:
    with pytest.raises(SweepError, match="no matrix 'nope'"):
        summary(queue, "nope")
    with pytest.raises(SweepError, match="no matrix 'nope'"):
        export(queue, "nope")


def test_export_is_the_seed_status_form(half_done: SweepQueue) -> None:
    store = half_done.store
    j3 = next(e for e in half_done.entries("m") if e.job_id == "j3")
    assert j3.run_id is not None
    store.create_run(j3.run_id, "m-j3", RunRequest(argv=["true"]))
    store.set_placement(j3.run_id, "gpu-pod-0", "ssh", None)
    store.add_attempt(j3.run_id, "gpu-pod-0", "ssh")
    node = {"host": "gpu-pod-1", "task_id": "m-j3-1", "accelerators": [2, 3]}
    store.add_attempt(j3.run_id, "gpu-pod-1", "ssh", {"nodes": [node]})
    store.update_attempt(j3.run_id, 1, pid=4242)  # its runner said so
    now = T0 + 3 * 3600
    out = export(half_done, "m")
    assert list(out) == [f"j{i}" for i in range(10)]
    assert out["j3"] == {
        "state": "failed",
        "run_id": j3.run_id,
        "host": "gpu-pod-0",
        "gpus": [2, 3],  # where its latest attempt ran
        "nodes": ["m-j3-1"],
        "pid": 4242,  # the seed's pid
        "scheduler": "pod-0",  # the seed's pod: which scheduler claimed it
        "started_at": iso(now - 1500 - 600),
        "finished_at": iso(now - 1500),
        "attempts": 2,
        "last_error": "Traceback (most recent call last):\n  ...\nOOM: 80 GiB\n\n",
    }
    assert out["j9"] == {
        "state": "queued",
        "run_id": out["j9"]["run_id"],
        "host": None,
        "gpus": [],
        "nodes": [],
        "pid": None,
        "scheduler": None,
        "started_at": None,
        "finished_at": None,
        "attempts": 0,
        "last_error": "",
    }
    assert out["j6"]["state"] == "running" and out["j6"]["finished_at"] is None
    assert iso(T0) == "2026-05-28T20:26:40Z"


def test_export_of_1200_entries_takes_a_few_queries(queue: SweepQueue) -> None:
    _add(queue, 1200)
    statements: list[str] = []

    def count(*args: Any) -> None:
        statements.append(args[2])

    event.listen(queue.store.engine, "before_cursor_execute", count)
    try:
        out = export(queue, "m")
    finally:
        event.remove(queue.store.engine, "before_cursor_execute", count)
    assert len(out) == 1200
    selects = [st for st in statements if st.lstrip().upper().startswith("SELECT")]
    assert len(selects) <= 8, selects  # matrix, entries, runs and attempts in chunks of 500


def test_runs_by_id_and_attempts_of(queue: SweepQueue) -> None:
    store = queue.store
    store.create_run("r-a", "a", RunRequest())
    store.create_run("r-b", "b", RunRequest())
    store.add_attempt("r-b", "h", "ssh")
    ids = [f"missing-{i}" for i in range(1100)] + ["r-b", "r-a", "r-a"]
    assert set(store.runs_by_id(ids)) == {"r-a", "r-b"}
    assert store.runs_by_id(ids)["r-a"].name == "a"
    assert {k: len(v) for k, v in store.attempts_of(ids).items()} == {"r-b": 1}
    assert store.runs_by_id([]) == {} and store.attempts_of([]) == {}


def test_last_line() -> None:
    assert last_line("a\nb  \n\n") == "b"
    assert last_line("") == ""
