"""The state store's tables (SQLAlchemy 2 ORM rows, portable types only).

:data:`TableBase` is the declarative base every table of the store is made with: runs,
attempts, run health and the schema version here, and other modules' tables (sweeps, retries,
run leases, metrics) that live in the same schema.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, Float, ForeignKey, Integer, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


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
    # v4: when its job started running and when the attempt ended (None: not yet, or before
    # v4); the job's pid on its (first) node as its runner reported it
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)


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
