"""Which host tasks the orphan sweep ends: only this store's runs' tasks that no live attempt
names (the rules of :func:`tcl.control.lifecycle.orphans.orphaned`, on a real store and the
local backend's handle), and the names a shim launch gives its tasks read back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tcl.control.backends.base import HostTask
from tcl.control.backends.shimtasks import host_task, task_ids
from tcl.control.backends.slurm.jobnames import job_name, read_job_name
from tcl.control.config import default_config
from tcl.control.errors import AgentError
from tcl.control.lifecycle.orphans import OrphanSettings, OrphanSweep, orphaned, sweep_host
from tcl.control.runrequest import RunRequest
from tcl.control.service import Control
from tcl.control.states import AttemptCause, RunState
from tcl.control.store import Store
from tcl.shim.api import ExecutorKind, NetworkMode, TaskInfo, TaskStatus


@pytest.fixture
def ctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Control:
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path))
    c = Control(default_config(), Store(f"sqlite:///{tmp_path / 'tcl.db'}"))
    c.store.create_run("r-1", "", RunRequest(argv=["train"], chips=1))
    return c


def _handle(task_id: str, **extra: object) -> dict[str, object]:
    return {"kind": "local", "nodes": [{"host": "local", "task_id": task_id}], **extra}


def _task(attempt: int = 0, task_id: str | None = None) -> HostTask:
    return HostTask("local", task_id or f"r-1-{attempt}", "r-1", attempt, 600.0)


def test_a_task_its_attempt_names_is_left_while_the_attempt_lives(ctl: Control) -> None:
    att = ctl.store.add_attempt("r-1", "local", "local", _handle("r-1-0", made=False))
    assert not orphaned(ctl, _task(), att)
    ctl.store.update_attempt("r-1", 0, state=RunState.RUNNING)
    assert not orphaned(ctl, _task(), ctl.store.latest_attempt("r-1"))
    # ended: its owner releases it once every event is kept; until then it is the owner's
    ctl.store.update_attempt("r-1", 0, state=RunState.SUCCEEDED, cause=AttemptCause.EXIT)
    assert not orphaned(ctl, _task(), ctl.store.latest_attempt("r-1"))
    # released, yet the host still holds it (the release could not reach it): an orphan
    ctl.store.update_attempt("r-1", 0, handle=_handle("r-1-0", released=True))
    assert orphaned(ctl, _task(), ctl.store.latest_attempt("r-1"))


def test_a_placement_its_adopter_found_not_started_lets_its_task_go(ctl: Control) -> None:
    """An adopter ends the attempt ``placement_failed`` and then releases the task; a release
    that does not reach the host leaves the task to the sweep (nobody else releases it)."""
    ctl.store.add_attempt("r-1", "local", "local", _handle("r-1-0"))
    ctl.store.update_attempt(
        "r-1", 0, state=RunState.TERMINATED, cause=AttemptCause.PLACEMENT_FAILED
    )
    assert orphaned(ctl, _task(), ctl.store.latest_attempt("r-1"))


def test_a_task_no_attempt_names_is_an_orphan(ctl: Control) -> None:
    assert orphaned(ctl, _task(), None)  # its attempt was discarded
    att = ctl.store.add_attempt("r-1", "local", "local", _handle("r-1-0-n1"))
    assert orphaned(ctl, _task(), att)  # its attempt names another task
    on_other_host = HostTask("gpu2", "r-1-0-n1", "r-1", 0, 600.0)
    assert orphaned(ctl, on_other_host, att)


def test_an_attempt_with_no_handle_yet_keeps_its_task_until_it_ends(ctl: Control) -> None:
    att = ctl.store.add_attempt("r-1", "local", "local")
    assert not orphaned(ctl, _task(), att)  # a placement of old, in flight
    ctl.store.update_attempt(
        "r-1", 0, state=RunState.TERMINATED, cause=AttemptCause.PLACEMENT_FAILED
    )
    assert orphaned(ctl, _task(), ctl.store.latest_attempt("r-1"))


@pytest.mark.parametrize(
    ("run_id", "attempt", "nodes"),
    [("r-1", 0, 1), ("train-a1b2", 12, 1), ("r-1", 3, 4), ("x-2-n1", 0, 1), ("x-n1", 5, 2)],
)
def test_a_launch_s_task_names_read_back_as_its_run_and_attempt(
    run_id: str, attempt: int, nodes: int
) -> None:
    for task_id in task_ids(run_id, attempt, nodes):
        got = host_task("h", _info(task_id, created_at=100.0), 160.0)
        assert got == HostTask("h", task_id, run_id, attempt, 60.0)


def test_a_vcjob_reads_back_as_the_run_and_attempt_its_labels_name() -> None:
    from tcl.control.backends.volcano.jobtasks import host_task as vc_task

    meta = {"name": "r-1-a3", "creationTimestamp": "2026-11-29T00:00:00Z"}
    labelled = {"metadata": {**meta, "labels": {"tcl.run-id": "r-1", "tcl.attempt": "3"}}}
    now = 1795910460.0  # 2026-11-29T00:01:00Z
    assert vc_task("k8s", labelled, now) == HostTask("k8s", "r-1-a3", "r-1", 3, 60.0)
    for labels in ({"tcl.run-id": "r-1"}, {"tcl.attempt": "3"}, {"app": "x"}, {}):
        assert vc_task("k8s", {"metadata": {**meta, "labels": labels}}, now) is None
    undated = {"metadata": {"name": "j", "labels": {"tcl.run-id": "r", "tcl.attempt": "0"}}}
    assert vc_task("k8s", undated, now) == HostTask("k8s", "j", "r", 0, 0.0)  # young: left


def test_a_name_tcl_never_gives_is_not_read() -> None:
    assert host_task("h", _info("someones-task", created_at=0.0), 1.0) is None


def _info(task_id: str, created_at: float) -> TaskInfo:
    return TaskInfo(
        id=task_id,
        name="",
        status=TaskStatus.RUNNING,
        network=NetworkMode.HOST,
        executor=ExecutorKind.PROCESS,
        created_at=created_at,
        updated_at=created_at,
    )


class _Host:
    """What the sweep asks of the local backend, recorded; its tasks as given."""

    def __init__(self, ctl: Control, tasks: list[HostTask], refuse: set[str]) -> None:
        self.asked: list[str] = []
        self.ended: list[str] = []
        backend = ctl.backend_for_kind("local")

        async def host_tasks(host: str) -> list[HostTask]:
            self.asked.append(host)
            return [t for t in tasks if t.host == host]

        async def end_task(task: HostTask) -> None:
            if task.task_id in refuse:
                raise AgentError(f"{task.host}: cannot be reached")
            self.ended.append(task.task_id)

        backend.host_tasks = host_tasks  # type: ignore[method-assign]
        backend.end_task = end_task  # type: ignore[method-assign]


def test_a_sweep_asks_only_hosts_where_something_may_be_left(ctl: Control) -> None:
    ctl.store.create_run("r-2", "", RunRequest(argv=["train"], chips=1))
    ctl.store.add_attempt("r-1", "settled", "local", _handle("r-1-0"))
    ctl.store.update_attempt("r-1", 0, state=RunState.SUCCEEDED, cause=AttemptCause.EXIT)
    ctl.store.add_attempt("r-2", "busy", "local", _handle("r-2-0"))
    host = _Host(ctl, [], set())
    sweep = OrphanSweep(ctl.store, lambda run: ctl, OrphanSettings(min_age_s=0.0))
    asyncio.run(sweep.sweep())
    assert sorted(host.asked) == ["busy", "settled"]  # both moved recently
    host.asked.clear()
    settled = OrphanSweep(ctl.store, lambda run: ctl, OrphanSettings(min_age_s=0, recent_s=0))
    asyncio.run(settled.sweep())
    assert host.asked == ["busy"]  # a run long settled: its host is not asked again


def test_an_orphan_that_cannot_be_ended_does_not_keep_the_next_one(ctl: Control) -> None:
    ctl.store.add_attempt("r-1", "local", "local", _handle("r-1-2"))
    orphans = [_task(0), _task(1)]  # neither named by the one attempt (it names r-1-2)
    host = _Host(ctl, orphans, refuse={"r-1-0"})
    sweep = OrphanSweep(ctl.store, lambda run: ctl, OrphanSettings(min_age_s=0.0))
    assert asyncio.run(sweep.sweep()) == ["r-1-1"]
    assert host.ended == ["r-1-1"]


def test_a_stopped_local_shim_is_not_started_to_be_swept(tmp_path: Path) -> None:
    from tcl.control.backends.local import LocalShimHost
    from tcl.control.config import LocalHost

    shim_dir = tmp_path / "local-shim"
    shim_dir.mkdir()
    host = LocalShimHost("local", LocalHost(type="local", fake_accelerators="h100:1"), shim_dir)
    assert asyncio.run(host.running_shim()) is None
    assert sorted(p.name for p in shim_dir.iterdir()) == []  # nothing started, no token made


def test_a_task_a_later_live_attempt_names_is_not_an_orphan(ctl: Control) -> None:
    """A SLURM requeue: attempt 1 follows the job named for attempt 0, which ended (released):
    the sweep leaves the job alone while attempt 1 lives."""
    job = _task(0)
    ctl.store.add_attempt("r-1", "local", "local", _handle("r-1-0", released=True))
    ctl.store.update_attempt("r-1", 0, state=RunState.TERMINATED, cause=AttemptCause.PREEMPTED)
    host = _Host(ctl, [job], set())
    assert asyncio.run(sweep_host(ctl, "local", "local", 0.0)) == ["r-1-0"]  # nobody follows it
    ctl.store.add_attempt("r-1", "local", "local", _handle("r-1-0"))  # the requeue's attempt
    host.ended.clear()
    assert asyncio.run(sweep_host(ctl, "local", "local", 0.0)) == []
    assert host.ended == []


@pytest.mark.parametrize("run_id", ["r", "train-3fa9c2", "a-1-2"])
@pytest.mark.parametrize("attempt", [0, 7])
def test_a_slurm_job_s_name_reads_back_as_its_run_and_attempt(run_id: str, attempt: int) -> None:
    assert read_job_name(job_name(run_id, attempt)) == (run_id, attempt)


def test_a_slurm_job_name_tcl_never_gives_is_not_read() -> None:
    for name in ("tcl-r", "someone-0", "tcl-", "tcl-r-x", "job"):  # tcl-r: an older version's
        assert read_job_name(name) is None
