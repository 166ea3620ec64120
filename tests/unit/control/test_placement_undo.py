"""A placement that launched a task but cannot record its run started: stopped meanwhile, the
task is stopped and freed (nothing left holding accelerators); the store not answering, the job
goes on and the run's next owner adopts it (never placed twice)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tcl.control.backends.base import Handle, Launched, Observer, Offer
from tcl.control.backends.table import BACKENDS
from tcl.control.errors import PlacementAborted, StoreError
from tcl.control.lifecycle.adopt import adopt_placement, interrupted
from tcl.control.lifecycle.submit import relaunch
from tcl.control.runrequest import RunRequest
from tcl.control.service import Control
from tcl.control.shipping import Snapshot
from tcl.control.states import AttemptCause, RunState
from tcl.runner.api import JobSpec
from tests.unit.control.test_multinode_watchdog import Scripted, TwoNodes, ctl

__all__ = ["ctl"]  # the fixture: a real store, the scripted two-node backend


class StoppedWhileLaunching(Scripted):
    """`tcl stop` lands while the task starts: the run is terminated before it is recorded."""

    control: Control | None = None

    async def launch(
        self,
        plan: Offer,
        job: JobSpec,
        snap: Snapshot,
        image: str | None,
        obs: Observer,
        on_handle: Callable[[Handle], None],
    ) -> Launched:
        launched = await super().launch(plan, job, snap, image, obs, on_handle)
        assert self.control is not None
        self.control.store.set_state(job.run_id, RunState.TERMINATED, message="stopped by user")
        return launched


def _queued_run(ctl: Control) -> str:
    ctl.store.create_run("r-2", "", RunRequest(argv=["train"], chips=0))
    ctl.store.set_placement("r-2", "local", "local", "a" * 64)
    ctl.store.set_state("r-2", RunState.QUEUED)
    return "r-2"


async def test_a_run_stopped_while_placed_has_its_task_stopped_and_freed(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(StoppedWhileLaunching, "control", ctl)
    monkeypatch.setitem(BACKENDS, "local", StoppedWhileLaunching)
    run_id = _queued_run(ctl)
    with pytest.raises(PlacementAborted, match="stopped while it was being placed"):
        await relaunch(ctl, run_id)
    gen = len(Scripted.launched)
    assert Scripted.stops == [gen] and Scripted.released == [gen]
    (att,) = ctl.store.attempts(run_id)
    assert (att.state, att.cause) == (RunState.TERMINATED, AttemptCause.STOPPED)
    assert TwoNodes.model_validate(att.handle).released
    assert ctl.store.get_run(run_id).state is RunState.TERMINATED


async def test_a_store_failing_after_launch_leaves_the_job_to_be_adopted_not_run_twice(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the placement stopped the job it could not record; a 1.5 s job ended before the
    stop landed, and the placement made again ran it a second time (CI18's two-scheduler
    PostgreSQL outage). Now the job goes on and the next owner adopts it."""
    run_id = _queued_run(ctl)
    real = ctl.store.record_started
    down = True

    def failing(*args: object, **kw: object) -> bool:
        if down and args and args[0] == run_id:
            raise StoreError("state store error: connection refused")
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ctl.store, "record_started", failing)
    with pytest.raises(StoreError):
        await relaunch(ctl, run_id)
    assert Scripted.stops == [] and Scripted.released == []  # left running
    (att,) = ctl.store.attempts(run_id)
    assert att.state is RunState.PROVISIONING and att.handle  # what adoption asks about
    run = ctl.store.get_run(run_id)
    assert interrupted(ctl.store, run) == att

    down = False  # the store answers again: the next owner adopts the job that runs
    assert await adopt_placement(ctl, run, att)
    assert len(Scripted.launched) == 1  # followed, never launched again
    assert ctl.store.get_run(run_id).state is RunState.PROVISIONING
    assert ctl.store.get_run(run_id).host == "local"


class RecordsItsHandle(Scripted):
    records_handle = True


async def test_a_handle_already_recorded_is_not_written_again(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store write per placement less (each is a commit, on the way of every sweep entry)."""
    monkeypatch.setitem(BACKENDS, "local", RecordsItsHandle)
    run_id = _queued_run(ctl)
    real = ctl.store.update_attempt
    handles: list[object] = []

    def counted(run: str, attempt: int, **kw: object) -> None:
        if "handle" in kw:
            handles.append(kw["handle"])
        real(run, attempt, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(ctl.store, "update_attempt", counted)
    await relaunch(ctl, run_id)
    assert len(handles) == 1, handles
    (att,) = ctl.store.attempts(run_id)
    assert att.handle == handles[0] and ctl.store.get_run(run_id).state is RunState.RUNNING
