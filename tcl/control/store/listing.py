"""The store's readers of many runs: lookups by reference, pages, searches, counts, and the
attempts of runs (one query for many runs, never one each)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from tcl.control.errors import RunNotFoundError
from tcl.control.states import RunState
from tcl.control.store.db import StoreBase
from tcl.control.store.records import IN_CHUNK, Attempt, Run, attempt_of, request_of, run_of
from tcl.control.store.tables import AttemptRow, RunRow


def _starts_with(column: Any, prefix: str) -> Any:
    """``column LIKE 'prefix%'`` with the prefix's own wildcards escaped."""
    like = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    return column.like(like, escape="\\")


def _haystack(row: RunRow) -> str:
    return " ".join((row.id, row.name, row.host or "", request_of(row).command_text())).casefold()


class RunListing(StoreBase):
    """Readers of runs and attempts; every method is one short transaction."""

    def resolve(self, ref: str) -> Run:
        """A run by exact id, unique id prefix, or name (the newest with that name)."""
        with self._session() as s:
            row = s.get(RunRow, ref)
            if row is not None:
                return run_of(row)
            by_name = s.scalars(
                select(RunRow).where(RunRow.name == ref).order_by(RunRow.created_at.desc())
            ).first()
            if by_name is not None:
                return run_of(by_name)
            rows = s.scalars(select(RunRow).where(_starts_with(RunRow.id, ref))).all()
            if len(rows) == 1:
                return run_of(rows[0])
            if len(rows) > 1:
                ids = ", ".join(sorted(r.id for r in rows)[:5])
                raise RunNotFoundError(f"{ref!r} matches several runs: {ids}")
        raise RunNotFoundError(f"no run matches {ref!r} (see `tcl ps -a`)")

    def runs_by_id(self, run_ids: Collection[str]) -> dict[str, Run]:
        """The runs of these ids that exist (a sweep's 1,200 in a few queries, not one each)."""
        ids = list(dict.fromkeys(run_ids))
        out: dict[str, Run] = {}
        with self._session() as s:
            for i in range(0, len(ids), IN_CHUNK):
                q = select(RunRow).where(RunRow.id.in_(ids[i : i + IN_CHUNK]))
                out.update((r.id, run_of(r)) for r in s.scalars(q))
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
            return [run_of(r) for r in s.scalars(q)]

    def search_runs(
        self,
        state: RunState | None = None,
        text: str = "",
        limit: int = 200,
        offset: int = 0,
        first: tuple[RunState, ...] = (),
    ) -> tuple[list[Run], int]:
        """A page of runs, newest first (the runs in ``first``'s states ahead of the rest, in
        that order of states), and how many match in all: one query. ``text`` (case folded)
        must occur in the id, name, host or command (argv, or the job's key); it is matched
        here rather than in SQL, where argv is JSON text with its own escapes."""
        order: list[Any] = [RunRow.created_at.desc()]
        if first:
            ranks = {st.value: i for i, st in enumerate(first)}
            order.insert(0, case(ranks, value=RunRow.state, else_=len(ranks)))
        with self._session() as s:
            if not text:
                q = select(RunRow, func.count().over()).order_by(*order)
                if state is not None:
                    q = q.where(RunRow.state == state.value)
                rows = s.execute(q.limit(limit).offset(offset)).all()
                if rows:
                    return [run_of(r) for r, _ in rows], int(rows[0][1])
                total = 0 if offset == 0 else self._count(s, state)
                return [], total
            q2 = select(RunRow).order_by(*order)
            if state is not None:
                q2 = q2.where(RunRow.state == state.value)
            needle = text.casefold()
            hits = [r for r in s.scalars(q2) if needle in _haystack(r)]
            return [run_of(r) for r in hits[offset : offset + limit]], len(hits)

    @staticmethod
    def _count(s: Session, state: RunState | None) -> int:
        q = select(func.count()).select_from(RunRow)
        if state is not None:
            q = q.where(RunRow.state == state.value)
        return int(s.execute(q).scalar_one())

    def latest_attempt(self, run_id: str) -> Attempt | None:
        with self._session() as s:
            row = s.scalars(
                select(AttemptRow)
                .where(AttemptRow.run_id == run_id)
                .order_by(AttemptRow.attempt.desc())
            ).first()
            return None if row is None else attempt_of(row)

    def attempts_of(self, run_ids: Collection[str]) -> dict[str, list[Attempt]]:
        """Every attempt of each of these runs, oldest first (a run with none is absent)."""
        ids = list(dict.fromkeys(run_ids))
        out: dict[str, list[Attempt]] = {}
        with self._session() as s:
            for i in range(0, len(ids), IN_CHUNK):
                q = (
                    select(AttemptRow)
                    .where(AttemptRow.run_id.in_(ids[i : i + IN_CHUNK]))
                    .order_by(AttemptRow.run_id, AttemptRow.attempt)
                )
                for row in s.scalars(q):
                    out.setdefault(row.run_id, []).append(attempt_of(row))
        return out

    def attempts(self, run_id: str) -> list[Attempt]:
        """Every attempt of the run, oldest first."""
        with self._session() as s:
            rows = s.scalars(
                select(AttemptRow).where(AttemptRow.run_id == run_id).order_by(AttemptRow.attempt)
            ).all()
            return [attempt_of(r) for r in rows]

    def count_by_state(self) -> dict[RunState, int]:
        """How many runs are in each state (a state with none is absent): one grouped query."""
        with self._session() as s:
            q = select(RunRow.state, func.count()).group_by(RunRow.state)
            return {RunState(st): int(n) for st, n in s.execute(q)}
