"""The state store's database: the engine, its schema and its sessions.

Opening a store makes its engine (SQLite: WAL, a busy timeout, foreign keys, a private 0600
file; or PostgreSQL), then, under the schema lock, creates the tables, records the schema
version of a new store and migrates an older one (:mod:`tcl.control.migrations`); a newer one
is refused. :class:`StoreBase` owns the engine; :class:`tcl.control.store.Store` adds the runs
and attempts.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from tcl.control.errors import StoreError
from tcl.control.migrations import LATEST, migrate
from tcl.control.store.tables import MetaRow, TableBase

SCHEMA_VERSION = LATEST


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cur = dbapi_conn.cursor()
    # the timeout first: switching to WAL takes a lock, and a concurrent opener would otherwise
    # fail at once with "database is locked"
    cur.execute("PRAGMA busy_timeout=10000")
    cur.execute("PRAGMA journal_mode=WAL")
    # WAL at NORMAL: a commit appends to the WAL without an fsync (a checkpoint syncs). A
    # process killed loses nothing committed, the file is never corrupted; a power loss may
    # roll back the last commits. SQLite's advice for WAL; the write lock is held for less,
    # which is what a sweep's placements and follows wait on (bench/seed002_sweep.py)
    cur.execute("PRAGMA synchronous=NORMAL")
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


class StoreBase:
    """The engine and schema of one state store; every session is one short transaction."""

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self.engine: Engine = create_engine(url, future=True)
            if self.engine.dialect.name == "sqlite":
                event.listen(self.engine, "connect", _sqlite_pragmas)
                _private_sqlite_file(self.engine)
            with _schema_lock(self.engine):
                TableBase.metadata.create_all(self.engine)
                self._tables_made = set(TableBase.metadata.tables)
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
        if set(TableBase.metadata.tables) <= self._tables_made:
            return
        try:
            with _schema_lock(self.engine):
                TableBase.metadata.create_all(self.engine)
                self._tables_made = set(TableBase.metadata.tables)
        except SQLAlchemyError as e:
            raise StoreError(f"cannot create tables in {self._safe_url()}: {e}") from None

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One short transaction, for the modules whose tables share this store (sweeps)."""
        with self._session() as s:
            yield s

    def close(self) -> None:
        self.engine.dispose()
