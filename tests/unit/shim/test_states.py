"""The transition table and the store's guarded writer (persistence included)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tcl.shim.api import (
    ExecutorKind,
    NetworkMode,
    RegistryAuth,
    TaskSpec,
    TaskStatus,
    TerminationReason,
)
from tcl.shim.errors import IllegalTransition, NotFound, TaskExists
from tcl.shim.states import TRANSITIONS, allowed
from tcl.shim.store import TaskStore, new_record

S = TaskStatus
HAPPY = [S.PENDING, S.PREPARING, S.PULLING, S.CREATING, S.RUNNING, S.TERMINATED]
# Every legal (current, target) pair, written out by hand independently of the table under test
# (the same set the table gave when it was still written source -> targets).
LEGAL = {
    (S.PENDING, S.PREPARING),
    (S.PREPARING, S.PULLING),
    (S.PREPARING, S.CREATING),  # nothing to pull
    (S.PULLING, S.PULLING),  # pull progress
    (S.PULLING, S.CREATING),
    (S.CREATING, S.RUNNING),
    (S.RUNNING, S.RUNNING),  # facts learnt after start
    *((s, S.TERMINATED) for s in TaskStatus),  # terminated -> terminated: repeatable
}


def test_table_covers_every_status() -> None:
    assert set(TRANSITIONS) == set(TaskStatus)


@pytest.mark.parametrize(("a", "b"), list(itertools.product(S, S)), ids=str)
def test_every_pair(a: TaskStatus, b: TaskStatus) -> None:
    assert allowed(a, b) is ((a, b) in LEGAL)


def test_happy_path_and_skip_pull() -> None:
    for a, b in itertools.pairwise(HAPPY):
        assert allowed(a, b)
    assert allowed(S.PREPARING, S.CREATING)


def test_every_state_can_terminate_and_nothing_leaves_terminated() -> None:
    for s in TaskStatus:
        assert allowed(s, S.TERMINATED)
    assert not any(allowed(S.TERMINATED, s) for s in TaskStatus if s is not S.TERMINATED)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (S.PENDING, S.RUNNING),
        (S.RUNNING, S.PULLING),
        (S.CREATING, S.PREPARING),
        (S.PENDING, S.PENDING),
        (S.PULLING, S.PREPARING),
    ],
)
def test_illegal_moves(a: TaskStatus, b: TaskStatus) -> None:
    assert not allowed(a, b)


def _store(tmp_path: Path) -> TaskStore:
    store = TaskStore(tmp_path)
    spec = TaskSpec(id="t1", image="img", registry_auth=RegistryAuth(username="u", password="pw"))
    store.add(
        new_record(
            spec,
            {"accelerators": [0], "network": NetworkMode.BRIDGE, "executor": ExecutorKind.DOCKER},
        )
    )
    return store


def test_store_refuses_illegal_moves(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with pytest.raises(IllegalTransition, match="pending -> running"):
        store.update("t1", status=S.RUNNING)
    assert store.get("t1").info.status is S.PENDING
    with pytest.raises(NotFound):
        store.update("nope", status=S.PREPARING)


def test_first_termination_reason_is_kept(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.update("t1", status=S.PREPARING)
    store.update(
        "t1", status=S.TERMINATED, reason=TerminationReason.IMAGE_ERROR, message="no such image"
    )
    store.update(
        "t1",
        status=S.TERMINATED,
        reason=TerminationReason.STOPPED_BY_USER,
        message="bye",
        exit_code=3,
    )
    info = store.get("t1").info
    assert info.termination_reason is TerminationReason.IMAGE_ERROR
    assert info.message == "no such image"
    assert info.exit_code == 3  # first known exit code is recorded when none was


def test_copies_and_duplicates(tmp_path: Path) -> None:
    store = _store(tmp_path)
    copy = store.get("t1")
    copy.info.accelerators.append(5)
    assert store.get("t1").info.accelerators == [0]
    with pytest.raises(TaskExists):
        store.add(store.get("t1"))


def test_persisted_atomically_without_credentials(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.update("t1", status=S.PREPARING)
    path = tmp_path / "tasks" / "t1" / "task.json"
    raw = json.loads(path.read_text())
    assert raw["version"] == 1 and raw["info"]["status"] == "preparing"
    assert "pw" not in path.read_text() and raw["spec"]["registry_auth"] is None
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["task.json"]  # no tmp left behind

    (tmp_path / "tasks" / "stray").mkdir()
    (tmp_path / "tasks" / "broken").mkdir()
    (tmp_path / "tasks" / "broken" / "task.json").write_text("{not json")
    again = TaskStore(tmp_path)
    stray = again.load()
    assert sorted(p.name for p in stray) == ["broken", "stray"]
    assert again.get("t1").info.status is S.PREPARING


def test_remove_moves_the_dir_aside_then_discard_deletes_it(tmp_path: Path) -> None:
    store = _store(tmp_path)
    trash = store.remove("t1")
    assert not (tmp_path / "tasks" / "t1").exists()
    assert trash is not None and trash.parent == tmp_path / "tasks"
    assert (trash / "task.json").exists()  # only renamed so far: the slow part is discard
    with pytest.raises(NotFound):
        store.get("t1")
    assert [p.name for p in TaskStore(tmp_path).load()] == [trash.name]  # a crash leaves stray
    store.discard(trash)
    assert list((tmp_path / "tasks").iterdir()) == []
