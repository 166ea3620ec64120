"""Where a run with a retry policy stands between attempts: failed attempts counted, and
whether it waits to be placed again (and from when).

Its own table in the state store (made by ``create_all``, no migration): a row exists once a
run's attempt ended and the policy placed it back in the queue; ``waiting`` is cleared when
the next attempt is placed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Boolean, Float, ForeignKey, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from tcl.control.lifecycle.retry_policy import RetryPolicy
from tcl.control.store import Run, Store, TableBase


class RunRetryRow(TableBase):
    __tablename__ = "tcl_run_retries"

    run_id: Mapped[str] = mapped_column(ForeignKey("tcl_runs.id"), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    requeues: Mapped[int] = mapped_column(Integer, default=0)  # preemptions, not failures
    waiting: Mapped[bool] = mapped_column(Boolean, default=False)
    not_before: Mapped[float] = mapped_column(Float, default=0.0)
    why: Mapped[str] = mapped_column(String(2048), default="")


@dataclass(frozen=True)
class RetryState:
    run_id: str
    failures: int
    requeues: int
    waiting: bool
    not_before: float
    why: str

    @property
    def due(self) -> bool:
        return self.waiting and time.time() >= self.not_before


def policy_of(run: Run) -> RetryPolicy | None:
    return run.request.retry


class Retries:
    """The retry rows of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.ensure_tables()

    def get(self, run_id: str) -> RetryState | None:
        with self.store.session() as s:
            row = s.get(RunRetryRow, run_id)
            return None if row is None else _state(row)

    def wait(self, run_id: str, delay_s: float, failed: bool, why: str) -> RetryState:
        """The run's attempt ended; it waits ``delay_s`` to be placed again."""
        with self.store.session() as s:
            row = s.get(RunRetryRow, run_id, with_for_update=True)
            if row is None:
                row = RunRetryRow(run_id=run_id, failures=0, requeues=0)
                s.add(row)
            row.failures = (row.failures or 0) + (1 if failed else 0)
            row.requeues = (row.requeues or 0) + (0 if failed else 1)
            row.waiting = True
            row.not_before = time.time() + delay_s
            row.why = why[:2048]
            s.flush()
            return _state(row)

    def postpone(self, run_id: str, delay_s: float, why: str) -> None:
        """Nothing could place it now: it waits again, for a while (not a failure)."""
        with self.store.session() as s:
            row = s.get(RunRetryRow, run_id, with_for_update=True)
            if row is not None:
                row.waiting = True
                row.not_before = time.time() + delay_s
                row.why = why[:2048]

    def placed(self, run_id: str) -> None:
        with self.store.session() as s:
            row = s.get(RunRetryRow, run_id, with_for_update=True)
            if row is not None:
                row.waiting = False

    def waiting(self, run_id: str) -> RetryState | None:
        state = self.get(run_id)
        return state if state is not None and state.waiting else None


def _state(row: RunRetryRow) -> RetryState:
    return RetryState(
        row.run_id,
        row.failures or 0,
        row.requeues or 0,
        bool(row.waiting),
        row.not_before or 0.0,
        row.why or "",
    )
