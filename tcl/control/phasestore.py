"""When each attempt of a run reached each phase of its start, and how far its steps went.

A runner marks the phases it sees and the job reports the rest (``tcl.runner.metricline.Phase``:
runner ready, environment ready, job started, JAX ready, state ready, compiled, first step), as
``phase`` events of the run's log. A pull keeps them here, one row per attempt, node and phase
(the first mark wins), beside the latest step each node reported (:data:`LAST_STEP`, from the
metric events with a step: heartbeats too), which goodput needs (:mod:`tcl.control.goodput`).

Keeping the same events twice changes nothing. Its own table (made by ``create_all``, no
migration), like the metric rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import Float, ForeignKey, Integer, String, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Mapped, Session, mapped_column

from tcl.control.goodput import LAST_STEP, RunPhases
from tcl.control.store import Store, TableBase
from tcl.runner.api import EventKind
from tcl.runner.metricline import Phase, parse_json

if TYPE_CHECKING:
    from sqlalchemy.engine import Dialect

    from tcl.control.logcache import KeptEvent

_KEY = ("run_id", "attempt", "node", "phase")


class PhaseRow(TableBase):
    __tablename__ = "tcl_phases"

    run_id: Mapped[str] = mapped_column(ForeignKey("tcl_runs.id"), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[int] = mapped_column(Integer, primary_key=True)
    phase: Mapped[str] = mapped_column(String(32), primary_key=True)
    ts: Mapped[float] = mapped_column(Float)


class PhaseStore:
    """The phase rows of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.ensure_tables()

    def add(self, run_id: str, events: Iterable[KeptEvent]) -> None:
        """Keep the phases and the latest step among ``events`` (others are skipped)."""
        marks: dict[tuple[int, int, str], float] = {}
        last: dict[tuple[int, int, str], float] = {}
        for e in events:
            if e.kind is EventKind.PHASE and e.data in Phase.__members__.values():
                key = (e.attempt, e.node, str(e.data))
                marks[key] = min(e.ts, marks.get(key, e.ts))
            elif e.kind is EventKind.METRIC and e.data is not None and '"step"' in e.data:
                rec = parse_json(e.data)
                if rec is not None and rec.step is not None:
                    key = (e.attempt, e.node, LAST_STEP)
                    last[key] = max(e.ts, last.get(key, e.ts))
        if not marks and not last:
            return
        with self.store.session() as s:
            dialect = s.get_bind().dialect
            if marks:
                _upsert(s, dialect, _rows(run_id, marks), later_wins=False)
            if last:
                _upsert(s, dialect, _rows(run_id, last), later_wins=True)

    def of_runs(self, run_ids: Sequence[str]) -> dict[str, RunPhases]:
        """Each run's attempts' phases (runs without any are absent)."""
        if not run_ids:
            return {}
        out: dict[str, RunPhases] = {}
        with self.store.session() as s:
            q = select(PhaseRow).where(PhaseRow.run_id.in_(list(run_ids)))
            for r in s.scalars(q):
                at = out.setdefault(r.run_id, {}).setdefault(r.attempt, {})
                seen = at.get(r.phase)
                if seen is None:
                    at[r.phase] = r.ts
                else:  # another node's: the attempt reached a phase with its first node
                    at[r.phase] = max(seen, r.ts) if r.phase == LAST_STEP else min(seen, r.ts)
        return out


def _rows(run_id: str, marks: dict[tuple[int, int, str], float]) -> list[dict[str, Any]]:
    return [
        {"run_id": run_id, "attempt": a, "node": n, "phase": p, "ts": ts}
        for (a, n, p), ts in marks.items()
    ]


def _upsert(s: Session, dialect: Dialect, rows: list[dict[str, Any]], later_wins: bool) -> None:
    """Insert the rows; a key that is there keeps its time (a phase: the first mark), or takes
    the later one (the last step). Two processes keeping the same events both succeed."""
    if dialect.name in ("sqlite", "postgresql"):
        insert = sqlite.insert if dialect.name == "sqlite" else postgresql.insert
        stmt = insert(PhaseRow).values(rows)
        if later_wins:
            s.execute(
                stmt.on_conflict_do_update(
                    index_elements=_KEY,
                    set_={"ts": stmt.excluded.ts},
                    where=PhaseRow.ts < stmt.excluded.ts,
                )
            )
        else:
            s.execute(stmt.on_conflict_do_nothing(index_elements=_KEY))
        return
    for row in rows:  # another database: one at a time
        have = s.get(PhaseRow, (row["run_id"], row["attempt"], row["node"], row["phase"]))
        if have is None:
            s.add(PhaseRow(**row))
        elif later_wins and have.ts < row["ts"]:
            have.ts = row["ts"]
