"""A retry decided by an owner killed before it moved the run: the next owner carries it out.

Before: the attempt ended and its task was released, then the owner was killed before the run
went `waiting_retry`. The run stayed `running` with its task gone, and every later owner asked
the host for that task for ever (`not_found … trying again`: an entry of the 300-entry,
five-kill sweep stuck so). Now the task is released only once the run moved, and the retry
is counted once. The real store; the host is the scripted two-node backend."""

from __future__ import annotations

import pytest

from tcl.control.errors import StoreError
from tcl.control.lifecycle.retry import retry_after_end
from tcl.control.service import Control
from tcl.control.states import AttemptCause, RunState
from tests.unit.control.test_multinode_watchdog import Scripted, ctl, running_with_retries

__all__ = ["ctl"]  # the fixture: a real store, the scripted two-node backend


async def test_a_retry_cut_short_by_a_kill_is_carried_out_once_and_frees_the_task_last(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    running_with_retries(ctl, "r-2", gen=7)
    real = ctl.store.set_state

    def killed(run_id: str, state: RunState, **kw: object) -> bool:
        if state is RunState.WAITING_RETRY:
            raise StoreError("the owner was killed here")
        return real(run_id, state, **kw)  # type: ignore[arg-type]

    end = (RunState.FAILED, 3, "exit code 3", AttemptCause.EXIT)
    monkeypatch.setattr(ctl.store, "set_state", killed)
    with pytest.raises(StoreError):
        (att,) = ctl.store.attempts("r-2")
        await retry_after_end(ctl, ctl.store.get_run("r-2"), att, *end)
    assert Scripted.released == []  # its task is kept while the run says `running`
    monkeypatch.setattr(ctl.store, "set_state", real)

    (att,) = ctl.store.attempts("r-2")  # the next owner sees the job's end again
    assert await retry_after_end(ctl, ctl.store.get_run("r-2"), att, *end) is None
    assert ctl.store.get_run("r-2").state is RunState.WAITING_RETRY
    assert Scripted.released == [7]
    retry = ctl.retries.get("r-2")
    assert retry is not None and retry.failures == 1  # counted once
    (att,) = ctl.store.attempts("r-2")
    assert (att.state, att.cause) == (RunState.FAILED, AttemptCause.EXIT)
