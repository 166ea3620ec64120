"""A sweep entry whose run's host stops answering: the run's owner (the run controller) asks
again for the sweep's whole budget, then gives up without calling it the job's failure. The run
and its attempt end `terminated` for cause `infra`, and its entry's watcher, which only reads
the store, ends the entry `failed` saying why (the entry, the run and `tcl ps` agree; before,
the entry ended `failed` while its run stayed `running` with nobody following it); the task its
host may still hold is the orphan sweep's. The real controller, watcher, store and queue; the
host is a stand-in that refuses every connection."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from tcl.control.backends.base import HostTask
from tcl.control.config import default_config
from tcl.control.lifecycle.orphans import orphaned
from tcl.control.lifecycle.ownership import ControllerSettings
from tcl.control.lifecycle.reconcile import RunController
from tcl.control.runrequest import RunRequest
from tcl.control.service import Control
from tcl.control.states import AttemptCause, RunState
from tcl.control.sweep.admission import Admission
from tcl.control.sweep.model import EntryState
from tcl.control.sweep.queue import NewEntry, SweepQueue
from tcl.control.sweep.storeretry import StoreRetry
from tcl.control.sweep.watching import EntryWatcher
from tests.unit.control.test_follow import DeadRunner, FakeBackend, UnreachableShim, use_hosts


def test_a_host_silent_for_the_whole_budget_ends_the_run_for_infra(
    sqlite_queue: SweepQueue, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    queue = sqlite_queue
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path))
    use_hosts(monkeypatch, local=FakeBackend(DeadRunner(None), UnreachableShim()))
    ctl = Control(default_config(), queue.store)
    queue.add("m", {"argv": ["true"], "chips": 1}, [NewEntry("e0", {})])
    (entry,) = queue.claim("me", 1, 30.0)
    sweep_env = {"TCL_MATRIX": "m", "TCL_MATRIX_JOB_ID": "e0"}
    ctl.store.create_run("r-1", "", RunRequest(argv=["x"], env=sweep_env))
    ctl.store.set_state("r-1", RunState.PROVISIONING)
    ctl.store.set_placement("r-1", "local", "local", None)
    ctl.store.add_attempt("r-1", "local", "local", {"task_id": "r-1-0", "runner_port": 1})
    ctl.store.set_state("r-1", RunState.RUNNING)
    settings = ControllerSettings(sweep_unreachable_s=0.5)  # the budget
    controller = RunController(queue.store, lambda run: ctl, settings, only={"r-1"})
    watcher = EntryWatcher(
        queue, "me", StoreRetry(0.1, None), Admission(16, 1.0), asyncio.Event(), controller
    )

    async def scenario() -> tuple[EntryState, str]:
        stopping = asyncio.Event()
        loop = asyncio.create_task(controller.run(stopping))
        try:
            return await watcher.outcome(ctl, dataclasses.replace(entry, run_id="r-1"))
        finally:
            stopping.set()
            await loop

    state, why = asyncio.run(scenario())

    # in a user's words: tcl lost the host, the job did not fail (issue 31)
    assert state is EntryState.FAILED and "tcl lost contact with host local for 0 s" in why, why
    assert "not a failure of the job" in why, why
    run = ctl.store.get_run("r-1")
    assert run.state is RunState.TERMINATED and run.message == why, run
    (att,) = ctl.store.attempts("r-1")
    assert (att.state, att.cause) == (RunState.TERMINATED, AttemptCause.INFRA)
    # nobody will release its task: once its host answers, the orphan sweep ends it
    assert orphaned(ctl, HostTask("local", "r-1-0", "r-1", 0, 600.0), att)


class _Owner:
    """The daemon's run controller as the watcher sees it: it owns the run until ``let_go``."""

    def __init__(self) -> None:
        self.owned = True
        self._changed = asyncio.Event()

    async def adopt(self, run_id: str) -> bool:
        return True

    def owns(self, run_id: str) -> bool:
        return self.owned

    def changed(self, run_id: str) -> asyncio.Event:
        return self._changed

    def let_go(self) -> None:  # what the controller does once it released the run's task
        self.owned = False
        self._changed.set()
        self._changed = asyncio.Event()


def test_an_ended_run_s_entry_frees_its_slot_once_its_owner_released_the_task(
    sqlite_queue: SweepQueue, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    """The run ended, but its owner still frees its task on the host: claiming the next entry
    now would find the accelerators taken (refused, and the scheduler waits for a probe as if
    the cluster were full). The scheduler is woken once the owner let the run go."""
    queue = sqlite_queue
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path))
    ctl = Control(default_config(), queue.store)
    queue.add("m", {"argv": ["true"], "chips": 1}, [NewEntry("e0", {})])
    (entry,) = queue.claim("me", 1, 30.0)
    ctl.store.create_run("r-1", "", RunRequest(argv=["x"], env={"TCL_MATRIX": "m"}))
    ctl.store.set_state("r-1", RunState.PROVISIONING)
    ctl.store.set_state("r-1", RunState.RUNNING)
    ctl.store.set_state("r-1", RunState.SUCCEEDED)
    owner, wake, admission = _Owner(), asyncio.Event(), Admission(16, 1.0)
    admission.refused(0.0)  # full: only ended runs earn claims
    watcher = EntryWatcher(queue, "me", StoreRetry(0.1, None), admission, wake, owner)

    async def scenario() -> tuple[EntryState, str]:
        watching = asyncio.create_task(
            watcher.outcome(ctl, dataclasses.replace(entry, run_id="r-1"))
        )
        for _ in range(20):  # the store read and every wake-up the watcher gets
            await asyncio.sleep(0.01)
        assert not watching.done() and not wake.is_set() and admission.credits == 0
        owner.let_go()
        return await asyncio.wait_for(watching, 10)

    assert asyncio.run(scenario()) == (EntryState.DONE, "")
    assert wake.is_set() and admission.credits == 1
