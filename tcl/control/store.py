"""The state store: runs and their attempts (SQLAlchemy 2; SQLite WAL or PostgreSQL).

Two guarded writers (:meth:`Store.set_state`, :meth:`Store.update_attempt`) move a run and an
attempt between states, checking ``tcl.control.states.TRANSITIONS``: an illegal move raises
:class:`StateConflict` and leaves the row untouched; a final state met again keeps the first
outcome. The store is the one source of attempt numbers (:meth:`Store.add_attempt`).
The schema uses only portable types, so the same code runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import (
    JSON,
    Engine,
    Float,
    ForeignKey,
    Integer,
    String,
    create_engine,
    event,
    func,
    select,
    text,
)
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from tcl.control.errors import RunNotFoundError, StateConflict, StoreError
from tcl.control.migrations import LATEST, migrate
from tcl.control.runrequest import RunRequest
from tcl.control.states import AttemptCause, Move, RunState, move

SCHEMA_VERSION = LATEST
_IN_CHUNK = 500  # ids per IN (...) list: well under every backend's bound-parameter limit


class _Base(DeclarativeBase):
    pass


TableBase = _Base  # other modules' tables (sweeps) live in the same schema and are made with it


class RunRow(_Base):
    __tablename__ = "tcl_runs"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    name: Mapped[str] = mapped_column(String(256), default="", index=True)
    state: Mapped[str] = mapped_column(String(32), index=True)
    host: Mapped[str | None] = mapped_column(String(256), nullable=True)
    backend: Mapped[str | None] = mapped_column(String(32), nullable=True)
    request: Mapped[dict[str, Any]] = mapped_column(JSON)  # a RunRequest (tcl.control.runrequest)
    code_sha256: Mapped[str | None] = mapped_column(String(64), nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    message: Mapped[str] = mapped_column(String(2048), default="")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class AttemptRow(_Base):
    __tablename__ = "tcl_attempts"

    run_id: Mapped[str] = mapped_column(ForeignKey("tcl_runs.id"), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(256))
    backend: Mapped[str] = mapped_column(String(32))
    handle: Mapped[dict[str, Any]] = mapped_column(JSON)  # backend-specific: task id, ports
    state: Mapped[str] = mapped_column(String(32))
    log_cursor: Mapped[int] = mapped_column(Integer, default=0)  # last event seq kept locally
    created_at: Mapped[float] = mapped_column(Float)
    # why it ended (``AttemptCause``; '' until then, and for attempts recorded before v2)
    cause: Mapped[str] = mapped_column(String(32), default="", server_default="")


class RunHealthRow(_Base):
    """When refreshing a run first failed to reach its host (a row only while it fails).

    Its own table, so a store made before it gains it with ``create_all`` (no migration)."""

    __tablename__ = "tcl_run_health"

    run_id: Mapped[str] = mapped_column(ForeignKey("tcl_runs.id"), primary_key=True)
    unreachable_since: Mapped[float] = mapped_column(Float)


class MetaRow(_Base):
    __tablename__ = "tcl_meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(256))


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


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # the timeout first: switching to WAL takes a lock, and a concurrent opener would otherwise
    # fail at once with "database is locked"
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def _private_sqlite_file(engine: Engine) -> None:
    """A SQLite database file is 0600 before SQLite opens it: SQLite gives its ``-wal``,
    ``-shm`` and ``-journal`` files the database file's mode, so the umask decides nothing.
    One made before (0644) is tightened, with its companions, when it is ours."""
    db = engine.url.database
    if engine.dialect.name != "sqlite" or not db or db == ":memory:" or db.startswith("file:"):
        return
    try:
        with contextlib.suppress(FileExistsError):  # made 0600 if missing; else not opened here
            os.close(os.open(db, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as e:
        raise StoreError(f"cannot open the state store {db}: {e.strerror or e}") from None
    for path in (db, f"{db}-wal", f"{db}-shm", f"{db}-journal", f"{db}.schema-lock"):
        with contextlib.suppress(OSError):  # gone, or a read-only mount: the 0700 dir guards
            st = os.stat(path)
            if st.st_uid == os.geteuid() and st.st_mode & 0o077:
                os.chmod(path, 0o600)


_PG_SCHEMA_LOCK = 0x7C1_5C4E  # an advisory lock key of tcl's own ("tcl schema")


@contextmanager
def _schema_lock(engine: Engine) -> Iterator[None]:
    """One schema creator at a time: parallel first uses (many ``tcl`` commands on a fresh HOME,
    a team's daemons on an empty PostgreSQL) would all see no tables and all try to create them
    (PostgreSQL's DDL is not safe against that either), or insert the schema version twice. A
    ``flock`` beside a SQLite file; a session advisory lock on PostgreSQL."""
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _PG_SCHEMA_LOCK})
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": _PG_SCHEMA_LOCK})
        return
    db = engine.url.database
    if engine.dialect.name != "sqlite" or not db or db == ":memory:":
        yield
        return
    fd = os.open(f"{db}.schema-lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held for one short transaction
        yield
    finally:
        os.close(fd)


class Store:
    """Runs and attempts; every method is one short transaction."""

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self.engine: Engine = create_engine(url, future=True)
            if self.engine.dialect.name == "sqlite":
                event.listen(self.engine, "connect", _sqlite_pragmas)
                _private_sqlite_file(self.engine)
            with _schema_lock(self.engine):
                _Base.metadata.create_all(self.engine)
                self._tables_made = set(_Base.metadata.tables)
                with self._session() as s:
                    meta = s.get(MetaRow, "schema_version")
                    if meta is None:
                        s.add(MetaRow(key="schema_version", value=str(SCHEMA_VERSION)))
                    elif int(meta.value) > SCHEMA_VERSION:
                        raise StoreError(
                            f"the state store at {self._safe_url()} has schema {meta.value}, "
                            f"newer than this tcl ({SCHEMA_VERSION}); upgrade tcl"
                        )
                    elif int(meta.value) < SCHEMA_VERSION:
                        # one transaction: a step that fails leaves the store as it was
                        meta.value = str(migrate(s.connection(), int(meta.value)))
        except SQLAlchemyError as e:
            raise StoreError(f"cannot open the state store {self._safe_url()}: {e}") from None

    def _safe_url(self) -> str:
        try:
            from sqlalchemy.engine import make_url

            return make_url(self.url).render_as_string(hide_password=True)
        except Exception:
            return "(url)"

    @contextmanager
    def _session(self) -> Iterator[Session]:
        try:
            with Session(self.engine) as s, s.begin():
                yield s
        except SQLAlchemyError as e:
            raise StoreError(f"state store error: {e}") from None

    def ensure_tables(self) -> None:
        """Create the tables of modules imported after this store opened (sweeps), once: a
        store that made them (or was opened after their module was imported) does nothing."""
        if set(_Base.metadata.tables) <= self._tables_made:
            return
        try:
            with _schema_lock(self.engine):
                _Base.metadata.create_all(self.engine)
                self._tables_made = set(_Base.metadata.tables)
        except SQLAlchemyError as e:
            raise StoreError(f"cannot create tables in {self._safe_url()}: {e}") from None

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One short transaction, for the modules whose tables share this store (sweeps)."""
        with self._session() as s:
            yield s

    def close(self) -> None:
        self.engine.dispose()

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

    def list_runs(self, include_final: bool = True, limit: int = 200) -> list[Run]:
        with self._session() as s:
            q = select(RunRow).order_by(RunRow.created_at.desc()).limit(limit)
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
    ) -> bool:
        """The one writer of run state: True when applied, False when a final state is met
        again (the first outcome is kept); raises :class:`StateConflict` otherwise."""
        with self._session() as s:
            row = s.get(RunRow, run_id, with_for_update=True)
            if row is None:
                raise RunNotFoundError(f"no run {run_id!r}")
            current = RunState(row.state)
            verdict = move(current, state)
            if verdict is Move.ILLEGAL:
                raise StateConflict(f"run {run_id}: {current} → {state} is not allowed")
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

    def clear_unreachable(self, run_id: str) -> None:
        with self._session() as s:
            row = s.get(RunHealthRow, run_id)
            if row is not None:
                s.delete(row)

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
    ) -> None:
        """The attempt's guarded writer. A final state comes with its ``cause`` (why the
        attempt ended), kept with the first final state only."""
        if (state is not None and state.is_final) != (cause is not None):
            raise ValueError(f"attempt state {state}: a cause with a final state, and only then")
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
                    row.state = state.value
                    row.cause = cause.value if cause is not None else ""
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

    def attempt_counts(self, run_ids: Collection[str]) -> dict[str, int]:
        """How many attempts each of these runs has (a run with none is absent)."""
        ids = list(dict.fromkeys(run_ids))
        out: dict[str, int] = {}
        with self._session() as s:
            for i in range(0, len(ids), _IN_CHUNK):
                q = (
                    select(AttemptRow.run_id, func.count())
                    .where(AttemptRow.run_id.in_(ids[i : i + _IN_CHUNK]))
                    .group_by(AttemptRow.run_id)
                )
                out.update((run_id, int(n)) for run_id, n in s.execute(q))
        return out

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
