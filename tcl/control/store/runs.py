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
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from tcl.control.errors import RunNotFoundError, StateConflict, StoreError
from tcl.control.runrequest import RunRequest
from tcl.control.states import AttemptCause, Move, RunState, move
from tcl.control.store.db import StoreBase
from tcl.control.store.tables import AttemptRow, RunHealthRow, RunRow

_IN_CHUNK = 500  # ids per IN (...) list: well under every backend's bound-parameter limit


@dataclass(frozen=True)
class Run:
    id: str
    name: str
    state: RunState
    host: str | None
    backend: str | None
    request: RunRequest
    code_sha256: str | None
    exit_code: int | None
    message: str
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class Attempt:
    run_id: str
    attempt: int
    host: str
    backend: str
    handle: dict[str, Any]  # the backend's typed handle as JSON (``Control.handle`` reads it)
    state: RunState
    log_cursor: int
    created_at: float = 0.0
    cause: AttemptCause | None = None  # why it ended (None until then, or recorded before v2)
    started_at: float | None = None  # its job started running (None: not yet, or before v4)
    ended_at: float | None = None  # it ended (None: not yet, or before v4)
    pid: int | None = None  # the job's pid on its first node, as its runner reported it

    @property
    def duration_s(self) -> float | None:
        """How long its job ran: until it ended, or until now while it runs."""
        if self.started_at is None:
            return None
        return max(0.0, (self.ended_at or time.time()) - self.started_at)


def _request(row: RunRow) -> RunRequest:
    """The row's request, parsed (missing keys take their defaults, unknown ones are ignored)."""
    try:
        return RunRequest.model_validate(row.request)
    except ValidationError as e:  # a value of the wrong type: written by hand, or a future tcl
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise StoreError(
            f"run {row.id}: its stored request is unreadable ({where}: {first['msg']})"
        ) from None


def _run(row: RunRow) -> Run:
    return Run(
        row.id,
        row.name,
        RunState(row.state),
        row.host,
        row.backend,
        _request(row),
        row.code_sha256,
        row.exit_code,
        row.message,
        row.created_at,
        row.updated_at,
    )


def _attempt(row: AttemptRow) -> Attempt:
    return Attempt(
        row.run_id,
        row.attempt,
        row.host,
        row.backend,
        dict(row.handle),
        RunState(row.state),
        row.log_cursor,
        row.created_at,
        AttemptCause(row.cause) if row.cause else None,
        row.started_at,
        row.ended_at,
        row.pid,
    )


def _starts_with(column: Any, prefix: str) -> Any:
    """``column LIKE 'prefix%'`` with the prefix's own wildcards escaped."""
    like = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    return column.like(like, escape="\\")


def _haystack(row: RunRow) -> str:
    return " ".join((row.id, row.name, row.host or "", _request(row).command_text())).casefold()


def new_run_id(name: str = "") -> str:
    slug = "".join(c if c.isalnum() or c in "-_." else "-" for c in name.lower()).strip("-.")
    return f"{slug[:40] or 'run'}-{secrets.token_hex(3)}"


class Store(StoreBase):
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
            return _run(row)

    def get_run(self, run_id: str) -> Run:
        with self._session() as s:
            row = s.get(RunRow, run_id)
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r}")
            return _run(row)

    def resolve(self, ref: str) -> Run:
        """A run by exact id, unique id prefix, or name (the newest with that name)."""
        with self._session() as s:
            row = s.get(RunRow, ref)
            if row is not None:
                return _run(row)
            by_name = s.scalars(
                select(RunRow).where(RunRow.name == ref).order_by(RunRow.created_at.desc())
            ).first()
            if by_name is not None:
                return _run(by_name)
            rows = s.scalars(select(RunRow).where(_starts_with(RunRow.id, ref))).all()
            if len(rows) == 1:
                return _run(rows[0])
            if len(rows) > 1:
                ids = ", ".join(sorted(r.id for r in rows)[:5])
                raise RunNotFoundError(f"{ref!r} matches several runs: {ids}")
        raise RunNotFoundError(f"no run matches {ref!r} (see `tcl ps -a`)")

    def runs_by_id(self, run_ids: Collection[str]) -> dict[str, Run]:
        """The runs of these ids that exist (a sweep's 1,200 in a few queries, not one each)."""
        ids = list(dict.fromkeys(run_ids))
        out: dict[str, Run] = {}
        with self._session() as s:
            for i in range(0, len(ids), _IN_CHUNK):
                q = select(RunRow).where(RunRow.id.in_(ids[i : i + _IN_CHUNK]))
                out.update((r.id, _run(r)) for r in s.scalars(q))
        return out

    def list_runs(self, include_final: bool = True, limit: int | None = 200) -> list[Run]:
        """Newest first; ``limit`` None: all of them."""
        with self._session() as s:
            q = select(RunRow).order_by(RunRow.created_at.desc())
            if limit is not None:
                q = q.limit(limit)
            if not include_final:
                finals = [st.value for st in RunState if st.is_final]
                q = q.where(RunRow.state.not_in(finals))
            return [_run(r) for r in s.scalars(q)]

    def search_runs(
        self, state: RunState | None = None, text: str = "", limit: int = 200, offset: int = 0
    ) -> tuple[list[Run], int]:
        """A page of runs, newest first, and how many match in all: one query. ``text`` (case
        folded) must occur in the id, name, host or command (argv, or the job's key); it is
        matched here rather than in SQL, where argv is JSON text with its own escapes."""
        with self._session() as s:
            if not text:
                q = select(RunRow, func.count().over()).order_by(RunRow.created_at.desc())
                if state is not None:
                    q = q.where(RunRow.state == state.value)
                rows = s.execute(q.limit(limit).offset(offset)).all()
                if rows:
                    return [_run(r) for r, _ in rows], int(rows[0][1])
                total = 0 if offset == 0 else self._count(s, state)
                return [], total
            q2 = select(RunRow).order_by(RunRow.created_at.desc())
            if state is not None:
                q2 = q2.where(RunRow.state == state.value)
            needle = text.casefold()
            hits = [r for r in s.scalars(q2) if needle in _haystack(r)]
            return [_run(r) for r in hits[offset : offset + limit]], len(hits)

    @staticmethod
    def _count(s: Session, state: RunState | None) -> int:
        q = select(func.count()).select_from(RunRow)
        if state is not None:
            q = q.where(RunRow.state == state.value)
        return int(s.execute(q).scalar_one())

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
            current = RunState(row.state)
            verdict = move(current, state)
            if verdict is Move.ILLEGAL:
                raise StateConflict(f"run {run_id}: {current} → {state} is not allowed")
            if attempt is not None:
                att = s.get(AttemptRow, (run_id, attempt), with_for_update=True)
                if att is None:
                    raise RunNotFoundError(f"no attempt {attempt} of run {run_id!r}")
                if move(RunState(att.state), state) is Move.APPLY:
                    _move_attempt(att, state, cause)
            if verdict is Move.KEEP:
                return False
            row.state = state.value
            row.updated_at = time.time()
            if message is not None:
                row.message = message[:2048]
            if exit_code is not None:
                row.exit_code = exit_code
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
            return _attempt(row)

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
                verdict = move(RunState(row.state), state)
                if verdict is Move.ILLEGAL:
                    raise StateConflict(
                        f"run {run_id} attempt {attempt}: {row.state} → {state} is not allowed"
                    )
                if verdict is Move.APPLY:
                    _move_attempt(row, state, cause)
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

    def latest_attempt(self, run_id: str) -> Attempt | None:
        with self._session() as s:
            row = s.scalars(
                select(AttemptRow)
                .where(AttemptRow.run_id == run_id)
                .order_by(AttemptRow.attempt.desc())
            ).first()
            return None if row is None else _attempt(row)

    def attempts_of(self, run_ids: Collection[str]) -> dict[str, list[Attempt]]:
        """Every attempt of each of these runs, oldest first (a run with none is absent)."""
        ids = list(dict.fromkeys(run_ids))
        out: dict[str, list[Attempt]] = {}
        with self._session() as s:
            for i in range(0, len(ids), _IN_CHUNK):
                q = (
                    select(AttemptRow)
                    .where(AttemptRow.run_id.in_(ids[i : i + _IN_CHUNK]))
                    .order_by(AttemptRow.run_id, AttemptRow.attempt)
                )
                for row in s.scalars(q):
                    out.setdefault(row.run_id, []).append(_attempt(row))
        return out

    def attempts(self, run_id: str) -> list[Attempt]:
        """Every attempt of the run, oldest first."""
        with self._session() as s:
            rows = s.scalars(
                select(AttemptRow).where(AttemptRow.run_id == run_id).order_by(AttemptRow.attempt)
            ).all()
            return [_attempt(r) for r in rows]


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
