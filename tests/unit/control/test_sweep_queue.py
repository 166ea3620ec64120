"""The sweep queue on SQLite (WAL, a file in tmp_path); the late-owner guard runs on PostgreSQL
too (tests/integration/control/test_sweep_queue_postgres.py), and claims by concurrent processes
are tests/integration/control/test_sweep_queue_claims.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tcl.control.errors import SweepError
from tcl.control.store import Store
from tcl.control.sweep.model import EntryState
from tcl.control.sweep.queue import NewEntry, SweepQueue
from tests.polling import wait_until

SPEC: dict[str, Any] = {"argv": ["python", "train.py"], "chips": 1}


def _entries(n: int, prefix: str = "job") -> list[NewEntry]:
    return [NewEntry(f"{prefix}-{i:05d}", {"i": i}) for i in range(n)]


# shared with the PostgreSQL test ------------------------------------------------------------


def exercise_late_owner(queue: SweepQueue) -> None:
    """An owner whose lease was reaped and whose entry another owner claimed changes nothing."""
    queue.add("late", SPEC, [NewEntry("only", {})])
    [e] = queue.claim("a", 1, lease_s=0.05)
    assert queue.started("a", e.id)
    assert wait_until(queue.reap, 30, "a's lease to expire and be reaped") == [e.id]
    [again] = queue.claim("b", 1, lease_s=600)
    assert again.id == e.id and again.lease_owner == "b" and again.claims == 2
    assert again.run_id == e.run_id  # the next claimer adopts the run
    assert queue.heartbeat("a", 600) == set()
    assert queue.started("a", e.id) is False
    assert queue.finish("a", e.id, EntryState.FAILED, "late") is False
    assert queue.release("a", e.id, 0.0, "late") is False
    now = queue.entry(e.id)
    assert now.state is EntryState.CLAIMED and now.lease_owner == "b" and now.last_error != "late"
    assert now.lease_expires == again.lease_expires
    assert queue.started("b", e.id)
    assert queue.finish("b", e.id, EntryState.DONE)
    done = queue.entry(e.id)
    assert done.state is EntryState.DONE and done.lease_owner is None
    assert queue.finish("b", e.id, EntryState.DONE) is False  # once only


# SQLite -------------------------------------------------------------------------------------


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'tcl.db'}"


@pytest.fixture
def queue(url: str) -> Any:
    store = Store(url)
    q = SweepQueue(store)
    yield q
    q.close()
    store.close()


def test_add_is_idempotent_by_job_id(queue: SweepQueue) -> None:
    first = queue.add("m", SPEC, _entries(3))
    assert (first.added, first.existing) == (3, 0)
    [e] = queue.claim("a", 1, lease_s=600)
    assert queue.finish("a", e.id, EntryState.FAILED, "boom")
    # a name in use is refused unless appended to, and then only with the same command and
    # chip count; nothing added (a reused name merged two sweeps into one; issue 31)
    with pytest.raises(SweepError, match=r"matrix 'm' exists \(3 entries\): --append to add"):
        queue.add("m", SPEC, _entries(5))
    with pytest.raises(SweepError, match=r"matrix 'm' exists and runs another chips \(chips: 1\)"):
        queue.add("m", {**SPEC, "chips": 2}, _entries(5), append=True)
    assert len(queue.entries("m")) == 3
    again = queue.add("m", {**SPEC, "retry": {"max_retries": 2}}, _entries(5), append=True)
    assert (again.added, again.existing) == (2, 3)
    every = queue.entries("m")
    assert [x.job_id for x in every] == [f"job-{i:05d}" for i in range(5)]
    assert queue.entry(e.id).state is EntryState.FAILED  # left as it was
    assert queue.matrix("m").spec["retry"] == {"max_retries": 2}
    assert queue.counts("m") == {"m": {EntryState.QUEUED: 4, EntryState.FAILED: 1}}
    # the same job id in another matrix is another entry
    assert queue.add("other", SPEC, _entries(1)).added == 1


def test_claims_go_by_priority_then_age(queue: SweepQueue) -> None:
    queue.add(
        "m",
        SPEC,
        [
            NewEntry("low", {}, priority=0),
            NewEntry("high", {}, priority=5),
            NewEntry("mid", {}, priority=1),
            NewEntry("high2", {}, priority=5),
            NewEntry("low2", {}, priority=0),
        ],
    )
    got = queue.claim("a", 3, lease_s=600)
    assert [e.job_id for e in got] == ["high", "high2", "mid"]
    assert all(e.state is EntryState.CLAIMED and e.lease_owner == "a" for e in got)
    assert [e.job_id for e in queue.claim("b", 10, lease_s=600)] == ["low", "low2"]
    assert queue.claim("c", 10, lease_s=600) == []


def test_claim_respects_not_before(queue: SweepQueue) -> None:
    queue.add("m", SPEC, _entries(2))
    a, b = queue.claim("a", 2, lease_s=600)
    assert queue.release("a", a.id, time.time() + 3600, "no capacity")
    assert queue.release("a", b.id, time.time() - 1)
    [got] = queue.claim("a", 10, lease_s=600)
    assert got.id == b.id
    assert queue.claim("a", 10, lease_s=600) == []
    waiting = queue.entry(a.id)
    assert waiting.state is EntryState.QUEUED and waiting.last_error == "no capacity"
    assert waiting.lease_owner is None


def test_heartbeat_returns_held_ids_and_extends_leases(queue: SweepQueue) -> None:
    queue.add("m", SPEC, _entries(4))
    mine = queue.claim("a", 3, lease_s=5)
    [theirs] = queue.claim("b", 1, lease_s=5)
    assert queue.started("a", mine[0].id)  # running entries are held too
    before = {e.id: e.lease_expires for e in mine}
    assert queue.heartbeat("a", 600) == {e.id for e in mine}
    for e in mine:
        expires = queue.entry(e.id).lease_expires
        assert expires is not None and expires > (before[e.id] or 0) + 500
    assert queue.entry(theirs.id).lease_expires == theirs.lease_expires  # not b's
    assert queue.finish("a", mine[1].id, EntryState.DONE)
    assert queue.heartbeat("a", 600) == {mine[0].id, mine[2].id}
    assert queue.heartbeat("nobody", 600) == set()


def test_a_heartbeat_renews_only_the_entries_its_scheduler_handles(queue: SweepQueue) -> None:
    queue.add("m", SPEC, _entries(3))
    mine = queue.claim("a", 3, lease_s=600)
    # one claimed entry its scheduler dropped (a race): it is not renewed, so it lapses
    assert queue.heartbeat("a", 0.05, {mine[0].id, mine[1].id}) == {mine[0].id, mine[1].id}
    assert queue.entry(mine[2].id).lease_expires == mine[2].lease_expires
    assert queue.heartbeat("a", 600, set()) == set()
    assert wait_until(queue.reap, 30, "the unrenewed lease to lapse", done=bool)


def test_reap_requeues_expired_leases_only(queue: SweepQueue) -> None:
    queue.add("m", SPEC, _entries(4))
    short = queue.claim("dead", 2, lease_s=0.05)
    [long] = queue.claim("alive", 1, lease_s=600)
    assert queue.started("dead", short[0].id)
    reaped = wait_until(queue.reap, 30, "the dead owner's leases to expire and be reaped")
    assert sorted(reaped) == sorted(e.id for e in short)
    for e in short:
        back = queue.entry(e.id)
        assert back.state is EntryState.QUEUED and back.lease_owner is None
        assert back.lease_expires is None and back.run_id == e.run_id
    assert queue.entry(long.id).state is EntryState.CLAIMED
    assert queue.reap() == []
    queued = {e.id for e in queue.entries("m", [EntryState.QUEUED])}
    assert len(queued) == 3 and {e.id for e in short} <= queued
    assert {e.id for e in queue.claim("next", 10, lease_s=600)} == queued


def test_a_late_owner_changes_nothing(queue: SweepQueue) -> None:
    exercise_late_owner(queue)


def test_requeue_gives_final_entries_new_run_ids(queue: SweepQueue) -> None:
    queue.add("m", SPEC, _entries(4))
    done, failed, held, queued = queue.claim("a", 4, lease_s=600)
    assert queue.finish("a", done.id, EntryState.DONE)
    assert queue.finish("a", failed.id, EntryState.FAILED, "oom")
    assert queue.release("a", queued.id, 0.0)
    states = [EntryState.DONE, EntryState.FAILED, EntryState.QUEUED, EntryState.CLAIMED]
    back = queue.requeue("m", states)
    assert sorted(e.id for e in back) == sorted([done.id, failed.id])
    for old in (done, failed):
        new = queue.entry(old.id)
        assert new.state is EntryState.QUEUED and new.run_id != old.run_id
        assert new.started_at is None and new.ended_at is None
    assert queue.entry(held.id).state is EntryState.CLAIMED  # held ones are left alone
    assert queue.entry(held.id).run_id == held.run_id
    # by job id
    [e] = queue.claim("a", 1, lease_s=600)
    assert queue.finish("a", e.id, EntryState.FAILED)
    assert queue.requeue("m", [EntryState.FAILED], job_ids=["nope"]) == []
    assert [x.id for x in queue.requeue("m", [EntryState.FAILED], job_ids=[e.job_id])] == [e.id]


def test_cancel_returns_every_entry_it_cancelled_as_it_was(queue: SweepQueue) -> None:
    queue.add("m", SPEC, _entries(5))
    claimed, running, done = queue.claim("a", 3, lease_s=600)
    assert queue.started("a", running.id)
    assert queue.finish("a", done.id, EntryState.DONE)
    queue.add("other", SPEC, _entries(1))
    was = {e.id: e.state for e in queue.cancel("m")}
    assert len(was) == 4
    assert {i: st for i, st in was.items() if st is not EntryState.QUEUED} == {
        claimed.id: EntryState.CLAIMED,
        running.id: EntryState.RUNNING,
    }
    assert queue.counts("m") == {"m": {EntryState.CANCELLED: 4, EntryState.DONE: 1}}
    assert queue.heartbeat("a", 600) == set()  # its scheduler lets them go
    assert queue.finish("a", claimed.id, EntryState.DONE) is False
    assert [e.matrix for e in queue.claim("a", 10, lease_s=600)] == ["other"]
    assert len(queue.requeue("m", [EntryState.CANCELLED])) == 4
