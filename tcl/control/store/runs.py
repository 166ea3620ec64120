"""The state store: runs and their attempts (SQLAlchemy 2; SQLite WAL or PostgreSQL).

Two guarded writers (:meth:`Store.set_state`, :meth:`Store.update_attempt`) move a run and an
attempt between states, checking ``tcl.control.states.TRANSITIONS``: an illegal move raises
:class:`StateConflict` and leaves the row untouched; a final state met again keeps the first
outcome. The store is the one source of attempt numbers (:meth:`Store.add_attempt`).
The schema uses only portable types, so the same code runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from sqlalchemy import delete, select

from tcl.control.errors import RunNotFoundError, StateConflict, StoreError
from tcl.control.runrequest import RunRequest
from tcl.control.states import AttemptCause, Move, RunState, move
from tcl.control.store.listing import RunListing
from tcl.control.store.records import Attempt, Placement, Run, attempt_of, run_of
from tcl.control.store.tables import AttemptRow, RunHealthRow, RunRow

IN_CHUNK = 500  # ids per IN (...) list: well under every backend's bound-parameter limit


def new_run_id(name: str = "") -> str:
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in name.lower()).strip("-.")
    return f"{slug[:40] or 'run'}-{secrets.token_hex(3)}"


class Store(RunListing):
    """Runs and attempts; every method is one short transaction."""

    # runs -------------------------------------------------------------------------------

    def create_run(
        self, run_id: str, name: str, request: RunRequest, code_sha256: str | None = None
    ) -> Run:
        now = time.time()
        row = RunRow(
            id=run_id,
            name=name,
            state=RunState.PENDING.value,
            request=request.model_dump(mode="json"),
            code_sha256=code_sha256,
            message="",
            created_at=now,
            updated_at=now,
        )
        with self._session() as s:
            s.add(row)
            s.flush()
            return run_of(row)

    def get_run(self, run_id: str) -> Run:
        with self._session() as s:
            row = s.get(RunRow, run_id)
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r}")
            return run_of(row)

    def set_state(
        self,
        run_id: str,
        state: RunState,
        *,
        message: str | None = None,
        exit_code: int | None = None,
        attempt: int | None = None,
        cause: AttemptCause | None = None,
    ) -> bool:
        """The one writer of run state: True when applied, False when a final state is met
        again (the first outcome is kept); raises :class:`StateConflict` otherwise.

        ``attempt``: that attempt moves to ``state`` too (with ``cause`` when final), in the
        same transaction, where its own move applies: a reader never sees the run ended and
        its attempt not (or the reverse)."""
        if attempt is not None:
            _check_cause(state, cause)
        with self._session() as s:
            row = s.get(RunRow, run_id, with_for_update=True)
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r}")
            verdict = _run_move(row, state)
            if attempt is not None:
                att = s.get(AttemptRow, (run_id, attempt), with_for_update=True)
                if att is None:
                    raise RunNotFoundError(f"no attempt {attempt} of run {run_id!r}")
                if move(RunState(att.state), state) is Move.APPLY:
                    _move_attempt(att, state, cause)
            if verdict is Move.KEEP:
                return False
            _apply_run_move(row, state, message, exit_code)
            return True

    def record_started(
        self,
        run_id: str,
        attempt: int,
        placed: Placement,
        state: RunState,
        message: str | None = None,
        cause: AttemptCause | None = None,
    ) -> bool:
        """A launched attempt (its handle recorded before), in one transaction (it was five, each
        a commit, on the way of every run placed): unless its run ended meanwhile (stopped
        while it was placed: False, nothing written), the run placed and moved to ``state``
        (through ``provisioning`` unless it is ``queued``, with ``message``) and the attempt
        moved to it (``cause``: why, when final). Guarded like :meth:`set_state` and
        :meth:`update_attempt`: an illegal move raises and writes nothing."""
        _check_cause(state, cause)
        with self._session() as s:
            # the run, then its attempt: the order set_state locks them in
            row = s.get(RunRow, run_id, with_for_update=True)
            att = s.get(AttemptRow, (run_id, attempt), with_for_update=True)
            if att is None or row is None:
                raise RunNotFoundError(f"no attempt {attempt} of run {run_id!r}")
            if RunState(row.state).is_final:
                return False
            row.host, row.backend = placed.host, placed.backend
            row.code_sha256 = placed.code_sha256
            steps = [state] if state is RunState.QUEUED else [RunState.PROVISIONING, state]
            for step in steps:
                if _run_move(row, step) is Move.APPLY:
                    _apply_run_move(row, step, message if step is state else None, None)
            _guarded_attempt_move(att, state, cause)
            return True

    def set_placement(self, run_id: str, host: str, backend: str, code_sha256: str | None) -> None:
        with self._session() as s:
            row = s.get(RunRow, run_id)
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r}")
            row.host, row.backend, row.code_sha256 = host, backend, code_sha256
            row.updated_at = time.time()

    def note_unreachable(self, run_id: str) -> float:
        """Record a failed refresh; returns the time of the first one in a row."""
        with self._session() as s:
            row = s.get(RunHealthRow, run_id)
            if row is None:
                row = RunHealthRow(run_id=run_id, unreachable_since=time.time())
                s.add(row)
            return row.unreachable_since

    def clear_unreachable(self, *run_ids: str) -> None:
        """These runs' hosts answered: one statement however many."""
        if not run_ids:
            return
        with self._session() as s:
            s.execute(delete(RunHealthRow).where(RunHealthRow.run_id.in_(run_ids)))

    def unreachable_since(self, run_ids: list[str]) -> dict[str, float]:
        """Runs whose host the last refreshes could not reach, with the first failure's time."""
        if not run_ids:
            return {}
        with self._session() as s:
            rows = s.scalars(select(RunHealthRow).where(RunHealthRow.run_id.in_(run_ids)))
            return {r.run_id: r.unreachable_since for r in rows}

    def delete_run(self, run_id: str) -> None:
        """Remove a run that never reached a host (no attempt), e.g. a submit nothing took."""
        with self._session() as s:
            if s.scalars(select(AttemptRow).where(AttemptRow.run_id == run_id)).first():
                raise StoreError(f"run {run_id!r} has attempts: it is kept")
            row = s.get(RunRow, run_id)
            if row is not None:
                health = s.get(RunHealthRow, run_id)
                if health is not None:
                    s.delete(health)
                s.delete(row)

    def forget_cancelled_run(self, run_id: str) -> None:
        """Remove a run whose submit was cancelled before its job started and whose host holds
        nothing of it (the caller asked it: ``tcl.control.lifecycle.submit``); its attempts
        go with it."""
        with self._session() as s:
            for a in s.scalars(select(AttemptRow).where(AttemptRow.run_id == run_id)).all():
                s.delete(a)
            s.flush()
            health = s.get(RunHealthRow, run_id)
            if health is not None:
                s.delete(health)
            row = s.get(RunRow, run_id)
            if row is not None:
                s.delete(row)

    # attempts ---------------------------------------------------------------------------

    def add_attempt(
        self, run_id: str, host: str, backend: str, handle: dict[str, Any] | None = None
    ) -> Attempt:
        """A new attempt, numbered here (0, then one more than the last)."""
        with self._session() as s:
            last = s.scalars(
                select(AttemptRow.attempt)
                .where(AttemptRow.run_id == run_id)
                .order_by(AttemptRow.attempt.desc())
            ).first()
            row = AttemptRow(
                run_id=run_id,
                attempt=0 if last is None else last + 1,
                host=host,
                backend=backend,
                handle=handle or {},
                state=RunState.PROVISIONING.value,
                log_cursor=0,
                created_at=time.time(),
            )
            s.add(row)
            s.flush()
            return attempt_of(row)

    def update_attempt(
        self,
        run_id: str,
        attempt: int,
        *,
        handle: dict[str, Any] | None = None,
        state: RunState | None = None,
        cause: AttemptCause | None = None,
        log_cursor: int | None = None,
        pid: int | None = None,
    ) -> None:
        """The attempt's guarded writer. A final state comes with its ``cause`` (why the
        attempt ended), kept with the first final state only; ``pid``: its job's, when its
        runner reports it."""
        _check_cause(state, cause)
        with self._session() as s:
            row = s.get(AttemptRow, (run_id, attempt))
            if row is None:
                raise RunNotFoundError(f"no attempt {attempt} of run {run_id!r}")
            if handle is not None:
                row.handle = handle
            if state is not None:
                _guarded_attempt_move(row, state, cause)
            if pid is not None:
                row.pid = pid
            if log_cursor is not None and log_cursor > row.log_cursor:
                row.log_cursor = log_cursor

    def discard_attempt(self, run_id: str, attempt: int) -> None:
        """Remove an attempt whose launch left nothing on its host (no capacity, refused)."""
        with self._session() as s:
            row = s.get(AttemptRow, (run_id, attempt))
            if row is not None:
                s.delete(row)


def _run_move(row: RunRow, state: RunState) -> Move:
    """The verdict on moving the run to ``state``; an illegal move raises."""
    current = RunState(row.state)
    verdict = move(current, state)
    if verdict is Move.ILLEGAL:
        raise StateConflict(f"run {row.id}: {current} → {state} is not allowed")
    return verdict


def _apply_run_move(
    row: RunRow, state: RunState, message: str | None, exit_code: int | None
) -> None:
    row.state = state.value
    row.updated_at = time.time()
    if message is not None:
        row.message = message[:2048]
    if exit_code is not None:
        row.exit_code = exit_code


def _guarded_attempt_move(row: AttemptRow, state: RunState, cause: AttemptCause | None) -> None:
    """The attempt moved to ``state`` where that applies; an illegal move raises."""
    verdict = move(RunState(row.state), state)
    if verdict is Move.ILLEGAL:
        raise StateConflict(
            f"run {row.run_id} attempt {row.attempt}: {row.state} → {state} is not allowed"
        )
    if verdict is Move.APPLY:
        _move_attempt(row, state, cause)


def _move_attempt(row: AttemptRow, state: RunState, cause: AttemptCause | None) -> None:
    """An applied move of an attempt: its state, its cause, when it started and ended."""
    row.state = state.value
    row.cause = cause.value if cause is not None else ""
    now = time.time()
    if state is RunState.RUNNING and row.started_at is None:
        row.started_at = now
    if state.is_final and row.ended_at is None:
        row.ended_at = now


def _check_cause(state: RunState | None, cause: AttemptCause | None) -> None:
    if (state is not None and state.is_final) != (cause is not None):
        raise ValueError(f"attempt state {state}: a cause with a final state, and only then")
