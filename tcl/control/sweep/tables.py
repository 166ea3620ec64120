"""The sweep queue's tables (``tcl_matrices``, ``tcl_matrix_entries``), an entry row as its
record, and the SQLite engine the queue writes through (every transaction ``BEGIN IMMEDIATE``:
two claimers never read the same queued rows, ``tcl.control.sweep.queue``)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    Engine,
    Float,
    Index,
    Integer,
    String,
    UniqueConstraint,
    create_engine,
    event,
)
from sqlalchemy.orm import Mapped, mapped_column

from tcl.control.store import TableBase
from tcl.control.sweep.model import Entry, EntryState

HELD = [EntryState.CLAIMED.value, EntryState.RUNNING.value]
NAME_CHARS = 64  # a scheduler's name, as each entry records its last claimer


class MatrixRow(TableBase):
    __tablename__ = "tcl_matrices"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[float] = mapped_column(Float)


class EntryRow(TableBase):
    __tablename__ = "tcl_matrix_entries"
    __table_args__ = (
        UniqueConstraint("matrix", "job_id", name="uq_tcl_entry_job"),
        Index("ix_tcl_entry_claim", "state", "priority", "id"),
        Index("ix_tcl_entry_lease", "lease_owner"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    matrix: Mapped[str] = mapped_column(String(128), index=True)
    job_id: Mapped[str] = mapped_column(String(256))
    fields: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    priority: Mapped[int] = mapped_column(Integer, default=0)
    not_before: Mapped[float] = mapped_column(Float, default=0.0)
    lease_owner: Mapped[str | None] = mapped_column(String(64), nullable=True)
    lease_expires: Mapped[float | None] = mapped_column(Float, nullable=True)
    claims: Mapped[int] = mapped_column(Integer, default=0)
    run_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    last_error: Mapped[str] = mapped_column(String(2048), default="")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    # v4: the name of the scheduler that claimed it last (kept after its lease ends)
    scheduler: Mapped[str] = mapped_column(String(NAME_CHARS), default="", server_default="")


def entry_of(r: EntryRow) -> Entry:
    return Entry(
        r.id,
        r.matrix,
        r.job_id,
        dict(r.fields),
        EntryState(r.state),
        r.priority,
        r.not_before,
        r.lease_owner,
        r.lease_expires,
        r.claims,
        r.run_id,
        r.last_error,
        r.created_at,
        r.started_at,
        r.ended_at,
        r.scheduler,
    )


def immediate_engine(url: str) -> Engine:
    """A SQLite engine whose every transaction is ``BEGIN IMMEDIATE`` (SQLAlchemy's documented
    recipe: pysqlite's own implicit BEGIN turned off, the BEGIN emitted here)."""
    engine = create_engine(url, future=True)

    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine
