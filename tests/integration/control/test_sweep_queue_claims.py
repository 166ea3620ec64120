"""Claims by concurrent processes: each of 2,000 queued entries is claimed exactly once by four
spawned dispatcher processes, on SQLite (WAL) here and on PostgreSQL in
test_sweep_queue_postgres.py (``FOR UPDATE SKIP LOCKED``)."""

from __future__ import annotations

import multiprocessing
from collections import Counter
from pathlib import Path
from typing import Any

from tcl.control.store import Store
from tcl.control.sweep.model import EntryState
from tcl.control.sweep.queue import NewEntry, SweepQueue

SPEC: dict[str, Any] = {"argv": ["python", "train.py"], "chips": 1}


def _entries(n: int, prefix: str = "job") -> list[NewEntry]:
    return [NewEntry(f"{prefix}-{i:05d}", {"i": i}) for i in range(n)]


def _claim_until_empty(url: str, owner: str, batch: int, start: Any, out: Any) -> None:
    """One dispatcher process: claim batches until none is left, finish every entry claimed;
    sends back (owner, claimed ids, entries whose finish was refused)."""
    store = Store(url)
    queue = SweepQueue(store)
    claimed: list[int] = []
    refused: list[int] = []
    try:
        start.wait(60)
        while True:
            got = queue.claim(owner, batch, lease_s=600)
            if not got:
                break
            for e in got:
                claimed.append(e.id)
                if not queue.finish(owner, e.id, EntryState.DONE):
                    refused.append(e.id)
    finally:
        out.put((owner, claimed, refused))
        queue.close()
        store.close()


def exercise_concurrent_claims(
    url: str, entries: int = 2000, workers: int = 4, batch: int = 10
) -> None:
    """``workers`` processes (spawned) claim batches of ``batch`` from ``entries`` queued
    entries until none is left and finish them: each entry is claimed exactly once."""
    store = Store(url)
    queue = SweepQueue(store)
    assert queue.add("race", SPEC, _entries(entries)).added == entries
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(workers)
    out = ctx.Queue()
    procs = [
        ctx.Process(target=_claim_until_empty, args=(url, f"d{i}", batch, start, out))
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0, f"a dispatcher process failed ({p.exitcode})"
    per_owner = {owner: ids for owner, ids, _ in results}
    refused = [i for _, _, r in results for i in r]
    counts = Counter(i for ids in per_owner.values() for i in ids)
    doubles = {i: n for i, n in counts.items() if n > 1}
    assert doubles == {}, f"{len(doubles)} entries claimed more than once"
    assert refused == []
    every = queue.entries("race")
    assert len(every) == entries
    assert set(counts) == {e.id for e in every}  # every entry claimed once
    assert all(e.state is EntryState.DONE and e.claims == 1 for e in every)
    assert sum(1 for ids in per_owner.values() if ids) >= 2, "no contention happened"
    queue.close()
    store.close()


def test_concurrent_claims_by_four_processes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tcl.db'}"
    exercise_concurrent_claims(url, entries=2000, workers=4, batch=10)
