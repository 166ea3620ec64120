"""When a host's node became idle (tcl.control.lifecycle.idlehosts): busy while a run that has
not ended is placed on it; else since the latest of the node's creation and the end of the last
run placed on it. The daemon's deletion itself runs against the TPU emulator
(tests/integration/tpu/test_tpu_pod.py)."""

from __future__ import annotations

from tcl.control.lifecycle.idlehosts import IdleNode, idle_since
from tcl.control.runrequest import RunRequest
from tcl.control.states import RunState
from tcl.control.store import Attempt, Run


def _run(run_id: str, host: str, state: RunState, updated: float) -> Run:
    return Run(
        id=run_id,
        name=run_id,
        state=state,
        host=host,
        backend="tpu",
        request=RunRequest(argv=["x"]),
        code_sha256=None,
        exit_code=None,
        message="",
        created_at=0.0,
        updated_at=updated,
    )


def _att(run_id: str, host: str, ended: float | None) -> Attempt:
    return Attempt(
        run_id=run_id,
        attempt=0,
        host=host,
        backend="tpu",
        handle={},
        state=RunState.SUCCEEDED,
        log_cursor=0,
        ended_at=ended,
    )


def test_a_host_is_idle_since_its_last_run_ended_or_its_node_was_made() -> None:
    runs = [
        _run("a", "pod", RunState.SUCCEEDED, updated=150.0),
        _run("b", "pod", RunState.FAILED, updated=300.0),  # no attempt kept: its last update
        _run("c", "other", RunState.RUNNING, updated=400.0),  # another host's: not counted
    ]
    attempts = {"a": [_att("a", "pod", ended=140.0)]}
    assert idle_since("pod", runs, attempts, created_at=100.0) == 300.0
    assert idle_since("pod", runs[:1], attempts, created_at=100.0) == 140.0
    assert idle_since("pod", [], {}, created_at=100.0) == 100.0  # made, never used
    # a run not ended on it: busy
    live = [*runs, _run("d", "pod", RunState.RUNNING, updated=500.0)]
    assert idle_since("pod", live, attempts, created_at=100.0) is None
    # a run placed elsewhere now whose earlier attempt ran here still counts here
    moved = [_run("e", "other", RunState.SUCCEEDED, updated=600.0)]
    assert idle_since("pod", moved, {"e": [_att("e", "pod", ended=550.0)]}, 100.0) == 550.0


def test_the_countdown() -> None:
    node = IdleNode("pod", "tcl-pod", timeout_s=60.0, idle_since=1000.0)
    assert node.left_s(1030.0) == 30.0 and node.left_s(2000.0) == 0.0
    assert IdleNode("pod", "tcl-pod", 60.0, None).left_s(1030.0) is None
