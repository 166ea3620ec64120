"""Metric points in the state store on SQLite; the same checks run on PostgreSQL in
tests/integration/control/test_store_postgres.py."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from tcl.control.logcache import KeptEvent
from tcl.control.metricstore import ADD_CHUNK_ROWS, MetricPoint, MetricStore
from tcl.control.runrequest import RunRequest
from tcl.control.store import Store
from tcl.runner.api import EventKind, LogStream, RunnerState


def metric(seq: int, data: str, node: int = 0, attempt: int = 0) -> KeptEvent:
    return KeptEvent(
        seq=seq,
        ts=100.0 + seq,
        kind=EventKind.METRIC,
        stream=LogStream.STDOUT,
        data=data,
        node=node,
        attempt=attempt,
    )


def exercise_metricstore(store: Store) -> None:
    """Shared by the SQLite and the PostgreSQL test."""
    store.create_run("m-1", "m", RunRequest(argv=["x"]))
    store.create_run("m-2", "m", RunRequest(argv=["x"]))
    ms = MetricStore(store)
    events = [
        KeptEvent(seq=1, ts=1.0, kind=EventKind.LOG, stream=LogStream.STDOUT, data="hi\n"),
        metric(2, '{"kind":"train","loss":2.5,"step":1}'),
        metric(3, '{"kind":"val","step":1,"val_loss":3.0}', node=1),
        metric(4, "not json"),  # kept in the log cache as it came; no point
        metric(8, '{"kind":"heartbeat","step":1}'),  # a step alone (hang detection's): no point
        KeptEvent(seq=5, ts=5.0, kind=EventKind.STATE, state=RunnerState.SUCCEEDED),
        metric(6, '{"acc":0.5}', attempt=1),
    ]
    assert ms.add("m-1", events) == 3
    assert ms.add("m-1", events) == 0  # the same events again: nothing new
    assert ms.add("m-1", [*events, metric(7, '{"step":2,"loss":2.0}')]) == 1
    # another workstation's log cache numbers the same events otherwise (it pulled from a
    # later point): an event is known by its attempt, node and the runner's own seq
    elsewhere = [e.model_copy(update={"seq": e.seq + 40}) for e in events]
    assert ms.add("m-1", elsewhere) == 0
    points = ms.read("m-1")
    # a point's seq is its place in the store: increasing, not dense (PostgreSQL's sequence
    # also advances for a row skipped as kept already)
    seqs = [p.seq for p in points]
    assert seqs == sorted(set(seqs))
    assert [dataclasses.replace(p, seq=0) for p in points] == [
        MetricPoint("m-1", 0, 0, 0, 102.0, 1, "train", {"loss": 2.5}),
        MetricPoint("m-1", 0, 0, 1, 103.0, 1, "val", {"val_loss": 3.0}),
        MetricPoint("m-1", 0, 1, 0, 106.0, None, "", {"acc": 0.5}),
        MetricPoint("m-1", 0, 0, 0, 107.0, 2, "", {"loss": 2.0}),
    ]
    assert ms.read("m-1", after=seqs[1], limit=1) == [points[2]]
    # more points than one INSERT holds, some already kept
    many = [metric(i, f'{{"step":{i},"x":{i}}}') for i in range(1, 2 * ADD_CHUNK_ROWS + 10)]
    assert ms.add("m-2", many[:10]) == 10
    assert ms.add("m-2", many) == len(many) - 10
    assert [p.step for p in ms.read("m-2")] == list(range(1, 2 * ADD_CHUNK_ROWS + 10))
    assert ms.counts(["m-1", "m-2", "nope"]) == {"m-1": 4, "m-2": len(many)}
    assert ms.counts([]) == {} and ms.read("nope") == []
    # two processes keeping the same events at once (a daemon's follow, a `tcl logs`): both
    # succeed, each point is kept once
    store.create_run("m-3", "m", RunRequest(argv=["x"]))
    burst = [metric(i, f'{{"y":{i}}}') for i in range(1, 200)]
    added: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def keep() -> None:
        barrier.wait()
        try:
            added.append(MetricStore(store).add("m-3", burst))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=keep) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and sum(added) == len(burst)
    assert len(ms.read("m-3")) == len(burst)


def test_metric_store_on_sqlite(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'tcl.db'}")
    try:
        exercise_metricstore(store)
    finally:
        store.close()


def test_metric_store_on_an_sqlite_without_returning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(f"sqlite:///{tmp_path / 'tcl.db'}")
    monkeypatch.setattr(store.engine.dialect, "insert_returning", False)  # before SQLite 3.35
    try:
        exercise_metricstore(store)
    finally:
        store.close()
