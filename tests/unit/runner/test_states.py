"""The transition table and the guarded writer."""

from __future__ import annotations

import itertools

import pytest

from tcl.runner.api import RunnerState
from tcl.runner.errors import IllegalTransition
from tcl.runner.states import TRANSITIONS, StateMachine, allowed

S = RunnerState
# Written out by hand from design §3.2, independently of the table under test.
LEGAL = {
    (S.WAITING_SPEC, S.WAITING_CODE),
    (S.WAITING_SPEC, S.READY),
    (S.WAITING_CODE, S.READY),
    (S.READY, S.RUNNING),
    (S.RUNNING, S.SUCCEEDED),
    (S.RUNNING, S.FAILED),
    (S.READY, S.FAILED),
    (S.WAITING_SPEC, S.TERMINATED),
    (S.WAITING_CODE, S.TERMINATED),
    (S.READY, S.TERMINATED),
    (S.RUNNING, S.TERMINATED),
}


def test_table_covers_every_state() -> None:
    assert set(TRANSITIONS) == set(S)


@pytest.mark.parametrize(("src", "dst"), list(itertools.product(S, S)))
def test_every_pair(src: RunnerState, dst: RunnerState) -> None:
    assert allowed(src, dst) == ((src, dst) in LEGAL)


def test_final_states_are_dead_ends() -> None:
    for final in (S.SUCCEEDED, S.FAILED, S.TERMINATED):
        assert final.is_final
        assert not any(allowed(final, dst) for dst in S)


def test_writer_refuses_illegal_moves_and_records_legal_ones() -> None:
    seen: list[tuple[RunnerState, int | None]] = []
    m = StateMachine(on_change=lambda s, code: seen.append((s, code)))
    with pytest.raises(IllegalTransition, match="waiting_spec to running"):
        m.move(S.RUNNING)
    assert m.state is S.WAITING_SPEC and seen == []
    m.move(S.WAITING_CODE)
    with pytest.raises(IllegalTransition):
        m.move(S.TERMINATED, expect=frozenset({S.RUNNING}))  # narrowed by the caller
    m.move(S.READY)
    m.move(S.RUNNING)
    assert m.move(S.FAILED, exit_code=3) is S.RUNNING
    assert m.exit_code == 3
    assert seen == [(S.WAITING_CODE, None), (S.READY, None), (S.RUNNING, None), (S.FAILED, 3)]
    with pytest.raises(IllegalTransition):
        m.move(S.SUCCEEDED)


def test_a_runner_stopped_before_its_job_ran_says_it_never_started() -> None:
    """What an adopter of an unfinished placement asks: ``terminated`` alone cannot tell a
    placement undone (place it again) from a job stopped while it ran (never again)."""
    undone = StateMachine()
    undone.move(S.READY)
    undone.move(S.TERMINATED)
    assert not undone.started
    ran = StateMachine()
    ran.move(S.READY)
    ran.move(S.RUNNING)
    assert ran.started
    ran.move(S.TERMINATED)
    assert ran.started
