"""The runner's state machine: one transition table (target <- sources), read by
``allowed(current, target)``, and one guarded writer, ``StateMachine.move``.

    waiting_spec ──submit──► waiting_code ──code──► ready ──run──► running ──► succeeded
         │                        │                   │               ├──────► failed
         └────────────────────────┴───────────────────┴──stop─────────┴──────► terminated

A spec that needs no code (``code: null``) goes straight from waiting_spec to ready.
Every change is recorded as a ``state`` event in the event log, so followers see it in order
with the job's output.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from tcl.runner.api import RunnerState
from tcl.runner.errors import IllegalTransition

T = TypeVar("T")

S = RunnerState

# target state -> the states it may be entered from. No self-loops: repeated requests
# (the same spec twice, stop after the end) are handled by the caller before asking.
TRANSITIONS: dict[RunnerState, frozenset[RunnerState]] = {
    S.WAITING_SPEC: frozenset(),
    S.WAITING_CODE: frozenset({S.WAITING_SPEC}),
    S.READY: frozenset({S.WAITING_SPEC, S.WAITING_CODE}),
    S.RUNNING: frozenset({S.READY}),
    S.SUCCEEDED: frozenset({S.RUNNING}),
    S.FAILED: frozenset({S.RUNNING, S.READY}),  # READY -> FAILED: the job could not start
    S.TERMINATED: frozenset({S.WAITING_SPEC, S.WAITING_CODE, S.READY, S.RUNNING}),
}


def allowed(current: RunnerState, target: RunnerState) -> bool:
    return current in TRANSITIONS[target]


class StateMachine:
    """Holds the current state; ``move`` is the only writer and refuses illegal moves."""

    def __init__(self, on_change: Callable[[RunnerState, int | None], None] | None = None) -> None:
        self._state = S.WAITING_SPEC
        self._exit_code: int | None = None
        self._started = False  # the job was started (entered running) at some point
        self._lock = threading.Lock()
        self._on_change = on_change

    @property
    def state(self) -> RunnerState:
        return self._state

    @property
    def exit_code(self) -> int | None:
        return self._exit_code

    @property
    def started(self) -> bool:
        """Whether the job ever started: a runner stopped before ``run`` never ran it."""
        return self._started

    def move(
        self,
        target: RunnerState,
        *,
        expect: frozenset[RunnerState] | None = None,
        exit_code: int | None = None,
    ) -> RunnerState:
        """Enter ``target``; returns the previous state.

        ``expect`` narrows the table for this call (e.g. ``run`` only from READY gives a clearer
        error). Raises ``IllegalTransition`` (409) naming both states.
        """
        with self._lock:
            current = self._state
            sources = TRANSITIONS[target] if expect is None else TRANSITIONS[target] & expect
            if current not in sources:
                raise IllegalTransition(f"cannot go from {current} to {target}")
            self._state = target
            self._started = self._started or target is S.RUNNING
            if exit_code is not None:
                self._exit_code = exit_code
            if self._on_change is not None:
                # Inside the lock, so state events are logged in the order they happened.
                self._on_change(target, self._exit_code)
            return current

    def as_of(self, read: Callable[[], T]) -> tuple[T, RunnerState, int | None]:
        """``read()`` and the state and exit code as of what it read: no move happens between
        (a move logs its state event inside the same lock), so a reader of the event log never
        sees a final state whose event is not written yet."""
        with self._lock:
            return read(), self._state, self._exit_code
