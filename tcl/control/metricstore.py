"""Metrics kept in the state store: one row per ``metric`` event of a run.

A run's metric events arrive with its other events (a pull of its log, :mod:`.follow`); they
are kept here as well as in the local log cache so that every reader of the store (``tcl
metrics``, ``tcl ui``, a team's PostgreSQL) sees them. An event is known by its attempt, node
and the node's own ``seq`` (the runner's numbering, the same on every workstation; a log
cache's run-wide numbering is not, when two workstations pulled different parts of a run), so
keeping the same events twice, from one workstation or two, changes nothing. A point's ``seq``
is its place in the store: the cursor a reader pages on with.

Its own table (made by ``create_all``, no migration), like the retry rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import JSON, Float, ForeignKey, Integer, String, UniqueConstraint, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Mapped, Session, mapped_column

from tcl.control.logcache import KeptEvent
from tcl.control.store import Store, TableBase
from tcl.runner.api import EventKind
from tcl.runner.metricline import parse_json

if TYPE_CHECKING:
    from sqlalchemy.engine import CursorResult, Dialect

READ_LIMIT = 50_000  # points per read; a reader pages on with ``after``
# Rows per INSERT: 8 parameters each stay far below SQLite's 32,766 per statement.
ADD_CHUNK_ROWS = 500
_KEY = ("run_id", "attempt", "node", "node_seq")


class MetricRow(TableBase):
    __tablename__ = "tcl_metrics"

    __table_args__ = (UniqueConstraint(*_KEY, name="tcl_metrics_event"),)

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("tcl_runs.id"), index=True)
    attempt: Mapped[int] = mapped_column(Integer)
    node: Mapped[int] = mapped_column(Integer)
    node_seq: Mapped[int] = mapped_column(Integer)  # the runner's own seq of the event
    ts: Mapped[float] = mapped_column(Float)
    step: Mapped[int | None] = mapped_column(Integer, nullable=True)
    kind: Mapped[str] = mapped_column(String(64), default="")
    values: Mapped[dict[str, float]] = mapped_column(JSON)


@dataclass(frozen=True)
class MetricPoint:
    run_id: str
    seq: int
    attempt: int
    node: int
    ts: float
    step: int | None
    kind: str
    values: dict[str, float]


def _point(row: MetricRow) -> MetricPoint:
    return MetricPoint(
        row.run_id, row.seq, row.attempt, row.node, row.ts, row.step, row.kind, dict(row.values)
    )


class MetricStore:
    """The metric rows of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.ensure_tables()

    def add(self, run_id: str, events: Iterable[KeptEvent]) -> int:
        """Keep the metric events among ``events`` (others are skipped); returns how many
        were new."""
        rows: list[dict[str, Any]] = []
        for e in events:
            if e.kind is not EventKind.METRIC or e.data is None:
                continue
            rec = parse_json(e.data)
            if rec is None or not rec.values:
                continue  # a step alone is a heartbeat (hang detection's), not a point
            rows.append(
                {
                    "run_id": run_id,
                    "attempt": e.attempt,
                    "node": e.node,
                    "node_seq": e.node_seq,
                    "ts": e.ts,
                    "step": rec.step,
                    "kind": rec.kind,
                    "values": rec.values,
                }
            )
        if not rows:
            return 0
        new = 0
        with self.store.session() as s:
            dialect = s.get_bind().dialect
            for i in range(0, len(rows), ADD_CHUNK_ROWS):
                new += _insert_new(s, dialect, rows[i : i + ADD_CHUNK_ROWS])
        return new

    def read(
        self, run_id: str, after: int = 0, limit: int = READ_LIMIT, kind: str | None = None
    ) -> list[MetricPoint]:
        """The run's points with ``seq > after`` (of that ``kind`` only, when given), in
        order (at most ``limit``)."""
        q = select(MetricRow).where(MetricRow.run_id == run_id, MetricRow.seq > after)
        if kind is not None:
            q = q.where(MetricRow.kind == kind)
        with self.store.session() as s:
            return [_point(r) for r in s.scalars(q.order_by(MetricRow.seq).limit(limit))]

    def read_all(self, run_id: str, kind: str | None = None) -> list[MetricPoint]:
        """Every point of the run (of that ``kind`` only, when given), in order."""
        points: list[MetricPoint] = []
        while page := self.read(run_id, points[-1].seq if points else 0, kind=kind):
            points += page
            if len(page) < READ_LIMIT:
                break
        return points

    def counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        """How many points each run has (runs with none are absent)."""
        if not run_ids:
            return {}
        with self.store.session() as s:
            q = (
                select(MetricRow.run_id, func.count())
                .where(MetricRow.run_id.in_(list(run_ids)))
                .group_by(MetricRow.run_id)
            )
            return {run_id: int(n) for run_id, n in s.execute(q)}


def _insert_new(s: Session, dialect: Dialect, rows: list[dict[str, Any]]) -> int:
    """Insert the rows whose key is not there yet; how many were. Two processes keeping the
    same run's events at once (a ``tcl serve`` follow and a ``tcl logs``) both succeed: the
    database skips a key it has (ON CONFLICT DO NOTHING), rather than failing the second."""
    if dialect.name in ("sqlite", "postgresql"):
        insert = sqlite.insert if dialect.name == "sqlite" else postgresql.insert
        stmt = insert(MetricRow).values(rows).on_conflict_do_nothing(index_elements=_KEY)
        if dialect.insert_returning:  # the rows inserted, by name (psycopg's rowcount is -1)
            return len(s.execute(stmt.returning(MetricRow.seq)).all())
        done = cast("CursorResult[Any]", s.execute(stmt))  # SQLite before 3.35
        return max(0, done.rowcount)
    q = select(MetricRow.attempt, MetricRow.node, MetricRow.node_seq).where(
        MetricRow.run_id == rows[0]["run_id"]
    )
    have = {tuple(k) for k in s.execute(q)}
    fresh = [MetricRow(**r) for r in rows if (r["attempt"], r["node"], r["node_seq"]) not in have]
    s.add_all(fresh)
    return len(fresh)
