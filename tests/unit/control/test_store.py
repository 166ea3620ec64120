"""State store on SQLite (WAL); the same checks run on PostgreSQL in tests/integration."""

from __future__ import annotations

from pathlib import Path

import pytest

from tcl.control.errors import RunNotFoundError, StateConflict
from tcl.control.retries import Retries
from tcl.control.runrequest import RunRequest
from tcl.control.states import AttemptCause, RunState
from tcl.control.store import SCHEMA_VERSION, Placement, Store
from tcl.control.sweep.queue import NewEntry, SweepQueue


def exercise_store(store: Store) -> None:
    """Shared by the SQLite and the PostgreSQL test."""
    run = store.create_run("train-abc123", "train", RunRequest(argv=["python", "x.py"], chips=2))
    assert run.state is RunState.PENDING
    store.create_run("eval-def456", "eval", RunRequest(argv=["true"]))
    assert store.resolve("train").id == "train-abc123"  # by name
    assert store.resolve("eval-d").id == "eval-def456"  # by unique prefix
    with pytest.raises(RunNotFoundError):
        store.resolve("zzz")
    # the guarded writer refuses an illegal move and keeps the row as it was
    with pytest.raises(StateConflict):  # pending → running skips provisioning
        store.set_state(run.id, RunState.RUNNING)
    assert store.get_run(run.id).state is RunState.PENDING
    assert store.set_state(run.id, RunState.PROVISIONING)
    store.set_placement(run.id, "gpu1", "ssh", "ab" * 32)
    att = store.add_attempt(run.id, "gpu1", "ssh", {"task_id": "t1", "shim_port": 10998})
    assert att.attempt == 0
    store.update_attempt(run.id, 0, log_cursor=7, state=RunState.RUNNING)
    store.update_attempt(run.id, 0, log_cursor=3)  # a cursor never moves back
    latest = store.latest_attempt(run.id)
    assert latest is not None and latest.log_cursor == 7 and latest.handle["task_id"] == "t1"
    assert store.set_state(run.id, RunState.RUNNING)
    assert store.set_state(run.id, RunState.SUCCEEDED, exit_code=0)
    # an attempt ends with why; a final state without one (or a cause without one) is a bug
    with pytest.raises(ValueError, match="cause"):
        store.update_attempt(run.id, 0, state=RunState.SUCCEEDED)
    with pytest.raises(ValueError, match="cause"):
        store.update_attempt(run.id, 0, state=RunState.RUNNING, cause=AttemptCause.EXIT)
    assert store.attempts_of([run.id])[run.id][0].cause is None  # running: not ended yet
    store.update_attempt(run.id, 0, state=RunState.SUCCEEDED, cause=AttemptCause.EXIT)
    # a late stop after the job's exit keeps the first end and its cause
    store.update_attempt(run.id, 0, state=RunState.TERMINATED, cause=AttemptCause.STOPPED)
    ended = store.attempts_of([run.id, "eval-def456"])
    assert list(ended) == [run.id]  # a run without attempts is absent
    assert [(a.state, a.cause) for a in ended[run.id]] == [(RunState.SUCCEEDED, AttemptCause.EXIT)]
    # a late TERMINATED after the outcome is refused; the first outcome is kept
    assert store.set_state(run.id, RunState.TERMINATED) is False
    assert store.set_state(run.id, RunState.SUCCEEDED, exit_code=9) is False
    final = store.get_run(run.id)
    assert final.state is RunState.SUCCEEDED and final.exit_code == 0 and final.host == "gpu1"
    assert [r.id for r in store.list_runs(include_final=False)] == ["eval-def456"]
    assert len(store.list_runs()) == 2
    # a run and its attempt move in one write: both, or neither (no reader sees the run ended
    # and its attempt still running)
    ev = "eval-def456"
    store.set_state(ev, RunState.PROVISIONING)
    store.add_attempt(ev, "gpu1", "ssh")
    assert store.set_state(ev, RunState.RUNNING, attempt=0)
    with pytest.raises(RunNotFoundError):
        store.set_state(ev, RunState.FAILED, exit_code=1, attempt=5, cause=AttemptCause.EXIT)
    assert store.get_run(ev).state is RunState.RUNNING  # rolled back with the attempt's miss
    assert store.set_state(ev, RunState.FAILED, exit_code=1, attempt=0, cause=AttemptCause.EXIT)
    assert [(a.state, a.cause) for a in store.attempts(ev)] == [
        (RunState.FAILED, AttemptCause.EXIT)
    ]
    with pytest.raises(ValueError, match="cause"):  # a final state names why the attempt ended
        store.set_state(ev, RunState.TERMINATED, attempt=0)
    exercise_record_started(store)


def exercise_record_started(store: Store) -> None:
    """A launched attempt is recorded in one transaction: the run placed and moved (through
    provisioning unless queued), the attempt moved; nothing for a run stopped meanwhile, nor
    for an illegal move."""
    where = Placement("gpu1", "ssh", "f" * 64)
    for run_id in ("launch-a", "launch-q", "launch-stopped"):
        store.create_run(run_id, run_id, RunRequest(argv=["true"]))
        store.add_attempt(run_id, "gpu1", "ssh", {"task_id": "planned"})
    assert store.record_started("launch-a", 0, where, RunState.RUNNING)
    run = store.get_run("launch-a")
    assert (run.state, run.host, run.backend, run.code_sha256) == (
        RunState.RUNNING,
        "gpu1",
        "ssh",
        "f" * 64,
    )
    [att] = store.attempts("launch-a")
    assert att.state is RunState.RUNNING and att.started_at is not None
    # queued by its host's scheduler: the reason is the run's message
    assert store.record_started("launch-q", 0, where, RunState.QUEUED, message="pending: Priority")
    run = store.get_run("launch-q")
    assert (run.state, run.message) == (RunState.QUEUED, "pending: Priority")
    # stopped while it was placed: nothing written (the placement undoes its task)
    store.set_state("launch-stopped", RunState.TERMINATED, message="stopped")
    assert not store.record_started("launch-stopped", 0, where, RunState.RUNNING)
    run = store.get_run("launch-stopped")
    assert (run.state, run.host) == (RunState.TERMINATED, None)
    [att] = store.attempts("launch-stopped")
    assert att.state is RunState.PROVISIONING
    # an illegal move (a running run provisioned again) raises and writes nothing
    store.set_state("launch-q", RunState.RUNNING)
    elsewhere = Placement("gpu2", "ssh", "e" * 64)
    with pytest.raises(StateConflict):
        store.record_started("launch-q", 0, elsewhere, RunState.RUNNING)
    assert store.get_run("launch-q").host == "gpu1"
    with pytest.raises(ValueError, match="cause"):
        store.record_started("launch-q", 0, where, RunState.SUCCEEDED)


def test_sqlite_store(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'tcl.db'}")
    try:
        exercise_store(store)
        with store.engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert c.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL: no fsync
    finally:
        store.close()
    # reopening keeps the data
    again = Store(f"sqlite:///{tmp_path / 'tcl.db'}")
    assert again.get_run("train-abc123").state is RunState.SUCCEEDED
    again.close()


def downgrade_to_v1(store: Store) -> None:
    """Make ``store`` what a tcl of schema version 1 left: attempts without their cause, times
    and pid; matrix entries without their claimer."""
    with store.engine.begin() as c:
        for column in ("cause", "started_at", "ended_at", "pid"):
            c.exec_driver_sql(f"ALTER TABLE tcl_attempts DROP COLUMN {column}")
        c.exec_driver_sql("ALTER TABLE tcl_matrix_entries DROP COLUMN scheduler")
        c.exec_driver_sql("UPDATE tcl_meta SET value = '1' WHERE key = 'schema_version'")


def exercise_migration(url: str) -> None:
    """A version-1 store with an ended attempt opens as the latest version: the attempt kept,
    its cause unknown; new ends record theirs. Shared with the PostgreSQL test."""
    store = Store(url)
    queue = SweepQueue(store)  # its tables too
    queue.add("old-matrix", {"argv": ["true"]}, [NewEntry("e0", {})])
    store.create_run("old-run", "old", RunRequest(argv=["true"]))
    store.set_state("old-run", RunState.PROVISIONING)
    store.add_attempt("old-run", "gpu1", "ssh", {"task_id": "t0"})
    store.add_attempt("old-run", "gpu1", "ssh", {"task_id": "t1"})
    # v1 and v2 kept a run waiting for its retry as queued, with a waiting row
    for run_id in ("retrying", "in-slurm-queue"):
        store.create_run(run_id, run_id, RunRequest(argv=["true"]))
        store.set_state(run_id, RunState.QUEUED)
    Retries(store).wait("retrying", 30.0, True, "exit code 3; retry 1 of 3 in 30 s")
    downgrade_to_v1(store)
    store.close()
    store = Store(url)
    try:
        with store.engine.connect() as c:
            version = c.exec_driver_sql(
                "SELECT value FROM tcl_meta WHERE key = 'schema_version'"
            ).scalar()
        assert version == str(SCHEMA_VERSION) == "4"
        assert store.get_run("retrying").state is RunState.WAITING_RETRY
        assert store.get_run("in-slurm-queue").state is RunState.QUEUED
        first, _ = store.attempts("old-run")
        assert first.handle == {"task_id": "t0"} and first.cause is None
        assert (first.started_at, first.ended_at, first.pid, first.duration_s) == (None,) * 4
        store.update_attempt("old-run", 1, state=RunState.RUNNING, pid=4242)
        store.update_attempt("old-run", 1, state=RunState.TERMINATED, cause=AttemptCause.STOPPED)
        second = store.attempts("old-run")[1]
        assert second.cause is AttemptCause.STOPPED and second.pid == 4242
        assert second.started_at is not None and second.ended_at is not None
        assert second.duration_s is not None and 0 <= second.duration_s < 60
        [entry] = SweepQueue(store).entries("old-matrix")
        assert entry.scheduler == ""
        [claimed] = SweepQueue(store).claim("owner-1", 1, 600, scheduler="pod-a")
        assert claimed.scheduler == "pod-a"
    finally:
        store.close()
    Store(url).close()  # opening the latest version again changes nothing


def test_a_version_1_store_is_migrated(tmp_path: Path) -> None:
    exercise_migration(f"sqlite:///{tmp_path / 'tcl.db'}")
