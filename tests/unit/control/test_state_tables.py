"""The pure policies under every run and sweep entry: the state tables and the backoff.

Each table is read as a whole (every pair of states), so a new state or a new move is checked
against the rules the writers rely on: nothing leaves a final state through the table, every
state can be reached, and a final state met again keeps the first outcome. All four state
machines (run/attempt, sweep entry, shim task, runner job) speak one dialect: a ``TRANSITIONS``
table written target <- sources and one predicate, ``allowed(current, target)``."""

from __future__ import annotations

import enum
import itertools
import random
from collections.abc import Callable, Iterable, Mapping
from types import ModuleType
from typing import TypeVar

import pytest

import tcl.control.states
import tcl.control.sweep.model
import tcl.runner.states
import tcl.shim.states
from tcl.control.backoff import backoff_s
from tcl.control.states import TRANSITIONS as RUN_TRANSITIONS
from tcl.control.states import Move, RunState, move
from tcl.control.sweep.model import REQUEUE_FROM, EntryState
from tcl.control.sweep.model import TRANSITIONS as ENTRY_TRANSITIONS
from tcl.control.sweep.model import allowed as entry_allowed
from tcl.runner.api import RunnerState
from tcl.shim.api import TaskStatus

S = TypeVar("S")


def _reachable(start: S, table: Mapping[S, Iterable[S]]) -> set[S]:
    """States reachable from ``start`` through a target <- sources table."""
    seen, todo = {start}, [start]
    while todo:
        here = todo.pop()
        for target, sources in table.items():
            if here in sources and target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def _never(current: enum.Enum, target: enum.Enum) -> bool:
    return False


def _both_final(current: enum.Enum, target: enum.Enum) -> bool:
    # The run table's one rule outside the table: a final state met again keeps the first
    # outcome (``Move.KEEP``), which ``allowed`` admits.
    return bool(getattr(current, "is_final", False) and getattr(target, "is_final", False))


# module, its state enum, and the moves ``allowed`` admits beyond the table.
DIALECT: list[tuple[ModuleType, type[enum.Enum], Callable[[enum.Enum, enum.Enum], bool]]] = [
    (tcl.control.states, RunState, _both_final),
    (tcl.control.sweep.model, EntryState, _never),
    (tcl.shim.states, TaskStatus, _never),
    (tcl.runner.states, RunnerState, _never),
]


@pytest.mark.parametrize(("module", "states", "beyond"), DIALECT, ids=lambda v: v.__name__)
def test_every_state_table_speaks_one_dialect(
    module: ModuleType,
    states: type[enum.Enum],
    beyond: Callable[[enum.Enum, enum.Enum], bool],
) -> None:
    """target -> frozenset of the states it may be entered from, and ``allowed`` reads it so."""
    table = module.TRANSITIONS
    assert set(table) == set(states)
    for target, sources in table.items():
        assert isinstance(sources, frozenset), target
        assert all(isinstance(s, states) for s in sources), target
    allowed = getattr(module, "allowed", None)
    assert callable(allowed), f"{module.__name__} has no allowed(current, target)"
    for current, target in itertools.product(states, states):
        want = current in table[target] or beyond(current, target)
        assert allowed(current, target) is want, (current, target)


def test_the_run_table_names_every_state_and_reaches_each_from_pending() -> None:
    assert set(RUN_TRANSITIONS) == set(RunState)
    assert _reachable(RunState.PENDING, RUN_TRANSITIONS) == set(RunState)


def test_no_run_state_is_left_once_final() -> None:
    for target, sources in RUN_TRANSITIONS.items():
        assert not any(s.is_final for s in sources), f"{target} entered from a final state"


@pytest.mark.parametrize(
    ("current", "target"), list(itertools.product(RunState, RunState)), ids=str
)
def test_every_run_move_is_applied_kept_or_refused_by_the_table(
    current: RunState, target: RunState
) -> None:
    got = move(current, target)
    if current.is_final and target.is_final:
        assert got is Move.KEEP  # a late poll or a second stop keeps the first outcome
    elif current in RUN_TRANSITIONS[target]:
        assert got is Move.APPLY
    else:
        assert got is Move.ILLEGAL


def test_a_requeued_run_goes_back_to_queued_and_the_self_loops_are_the_commented_ones() -> None:
    assert move(RunState.RUNNING, RunState.QUEUED) is Move.APPLY  # a SLURM requeue
    self_loops = {s for s in RunState if not s.is_final and move(s, s) is Move.APPLY}
    # queued -> queued: a requeue seen again; running -> running: each poll of a live job;
    # waiting_retry -> waiting_retry: a placement again that found nothing waits again
    assert self_loops == {RunState.QUEUED, RunState.RUNNING, RunState.WAITING_RETRY}


def test_a_run_waits_for_its_retry_in_its_own_state_and_leaves_it_only_to_be_placed() -> None:
    for src in (RunState.PROVISIONING, RunState.RUNNING, RunState.QUEUED):
        assert move(src, RunState.WAITING_RETRY) is Move.APPLY  # its attempt ended
    assert move(RunState.PENDING, RunState.WAITING_RETRY) is Move.ILLEGAL  # never placed yet
    left_to = {t for t in RunState if move(RunState.WAITING_RETRY, t) is Move.APPLY}
    assert left_to == {
        RunState.QUEUED,  # placed in a scheduler's queue
        RunState.PROVISIONING,  # placed
        RunState.WAITING_RETRY,  # nothing free yet
        RunState.FAILED,  # placing it again was refused for good
        RunState.TERMINATED,  # stopped while it waited
    }
    assert move(RunState.PENDING, RunState.RUNNING) is Move.ILLEGAL  # placed first


def test_the_entry_table_names_every_state_and_reaches_each_from_queued() -> None:
    assert set(ENTRY_TRANSITIONS) == set(EntryState)
    assert _reachable(EntryState.QUEUED, ENTRY_TRANSITIONS) == set(EntryState)


def test_an_entry_leaves_a_final_state_only_by_the_users_requeue() -> None:
    for target, sources in ENTRY_TRANSITIONS.items():
        assert not any(s.is_final for s in sources), f"{target} entered from a final state"
    assert {s for s in EntryState if s.is_final} == REQUEUE_FROM


@pytest.mark.parametrize(
    ("current", "target"), list(itertools.product(EntryState, EntryState)), ids=str
)
def test_every_entry_move_follows_the_table(current: EntryState, target: EntryState) -> None:
    assert entry_allowed(current, target) is (current in ENTRY_TRANSITIONS[target])


def test_a_held_entry_goes_back_to_the_queue_and_a_queued_one_cannot_finish() -> None:
    for held in (EntryState.CLAIMED, EntryState.RUNNING):
        assert entry_allowed(held, EntryState.QUEUED)  # lease expired, no capacity, a retry
    assert not entry_allowed(EntryState.QUEUED, EntryState.DONE)
    assert not entry_allowed(EntryState.QUEUED, EntryState.RUNNING)  # claimed first


def test_backoff_is_full_jitter_under_a_doubling_cap() -> None:
    rng_state = random.getstate()
    random.seed(27)
    try:
        for attempt in range(12):
            bound = min(5.0, 0.25 * 2**attempt)
            waits = [backoff_s(attempt) for _ in range(200)]
            assert all(0 <= w <= bound for w in waits), (attempt, max(waits))
            # full jitter: the waits spread over the whole range, not around one value
            assert min(waits) < 0.1 * bound and max(waits) > 0.9 * bound, attempt
        assert max(backoff_s(60, base_s=1.0, cap_s=2.0) for _ in range(50)) <= 2.0
    finally:
        random.setstate(rng_state)
