"""The sweep queue: matrices and their entries in the state store, claimed with leases.

Any number of schedulers share one queue (one workstation's SQLite, or a team's PostgreSQL):

- a claim takes up to ``limit`` queued entries in one statement, highest priority first, with
  ``FOR UPDATE SKIP LOCKED`` on PostgreSQL and under ``BEGIN IMMEDIATE`` on SQLite (SQLite has
  no row locks; an immediate transaction takes the write lock up front, so two claimers never
  read the same queued rows, and a deferred one never fails upgrading its read);
- the claimer holds a lease on each entry and heartbeats them all in one statement;
- :meth:`SweepQueue.reap` returns entries whose lease expired (their scheduler died) to the
  queue; the next claimer adopts their run (still running on its host) rather than placing it
  again;
- every change a scheduler makes is guarded by ``lease_owner``: one that comes back late (its
  lease reaped, the entry claimed by another) changes nothing.

Times are epoch seconds from the writer's clock (the schedulers' clocks are assumed in sync to
well under a lease).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from tcl.control.errors import StoreError, SweepError
from tcl.control.store import Store, new_run_id
from tcl.control.sweep.model import REQUEUE_FROM, TRANSITIONS, Entry, EntryState, Matrix
from tcl.control.sweep.tables import (
    HELD,
    NAME_CHARS,
    EntryRow,
    MatrixRow,
    entry_of,
    immediate_engine,
)


@dataclass(frozen=True)
class NewEntry:
    job_id: str
    fields: dict[str, Any]
    priority: int = 0


@dataclass(frozen=True)
class Added:
    added: int
    existing: int  # entries whose job_id the matrix had already (left as they were)


# What a matrix's entries run: the same for every entry of one matrix (a re-add may not change
# it: `tcl matrix add` with a name in use and another command merged two sweeps into one).
RUN_KEYS = ("argv", "job", "chip", "chips", "nodes", "host", "image", "env")


def _shown(spec: dict[str, Any], keys: list[str]) -> str:
    return "; ".join(f"{k}: {spec.get(k)!r}" for k in keys)


class SweepQueue:
    """Matrices and entries; every method is one short transaction."""

    def __init__(self, store: Store) -> None:
        self.store = store
        store.ensure_tables()
        self._sqlite = store.engine.dialect.name == "sqlite"
        self._writer = immediate_engine(store.url) if self._sqlite else store.engine

    def close(self) -> None:
        if self._writer is not self.store.engine:
            self._writer.dispose()

    @contextmanager
    def _write(self) -> Iterator[Session]:
        try:
            with Session(self._writer) as s, s.begin():
                yield s
        except SQLAlchemyError as e:
            raise StoreError(f"state store error: {e}") from None

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with self.store.session() as s:
            yield s

    # matrices -----------------------------------------------------------------------------

    def add(
        self, name: str, spec: dict[str, Any], entries: Sequence[NewEntry], append: bool = False
    ) -> Added:
        """Add a matrix, or (``append``) more entries to the one of this name: idempotent by
        ``job_id`` (an entry the matrix has is left as it is, whatever its state). A name in
        use without ``append`` is a :class:`SweepError` (two sweeps merged by a reused name);
        with it, the matrix must run the same thing (:data:`RUN_KEYS`: else a SweepError
        naming what differs); nothing is added then. Its other settings (code, retries, time
        limit) are the new ones for all."""
        now = time.time()
        with self._write() as s:
            row = s.get(MatrixRow, name)
            if row is None:
                s.add(MatrixRow(name=name, spec=spec, created_at=now))
            elif not append:
                count = select(func.count()).where(EntryRow.matrix == name)
                raise SweepError(
                    f"matrix {name!r} exists ({s.execute(count).scalar_one()} entries): "
                    "--append to add to it (same command and chips), or a new --name"
                )
            else:
                differ = [k for k in RUN_KEYS if row.spec.get(k) != spec.get(k)]
                if differ:
                    raise SweepError(
                        f"matrix {name!r} exists and runs another "
                        f"{', '.join(differ)} ({_shown(row.spec, differ)}): add its entries "
                        "under a new --name, or give the same command and chips"
                    )
                row.spec = spec
            have = set(s.scalars(select(EntryRow.job_id).where(EntryRow.matrix == name)))
            fresh = list({e.job_id: e for e in entries if e.job_id not in have}.values())
            s.add_all(
                EntryRow(
                    matrix=name,
                    job_id=e.job_id,
                    fields=e.fields,
                    state=EntryState.QUEUED.value,
                    priority=e.priority,
                    not_before=0.0,
                    claims=0,
                    run_id=new_run_id(f"{name}-{e.job_id}"),
                    last_error="",
                    created_at=now,
                    updated_at=now,
                )
                for e in fresh
            )
        return Added(len(fresh), len(entries) - len(fresh))

    def matrix(self, name: str) -> Matrix:
        with self._read() as s:
            row = s.get(MatrixRow, name)
            if row is None:
                raise SweepError(f"no matrix {name!r} (see `tcl matrix ls`)")
            return Matrix(row.name, dict(row.spec), row.created_at)

    def matrices(self) -> list[Matrix]:
        with self._read() as s:
            rows = s.scalars(select(MatrixRow).order_by(MatrixRow.created_at)).all()
            return [Matrix(r.name, dict(r.spec), r.created_at) for r in rows]

    def counts(self, name: str | None = None) -> dict[str, dict[EntryState, int]]:
        """Entries by state, per matrix."""
        with self._read() as s:
            q = select(EntryRow.matrix, EntryRow.state, func.count()).group_by(
                EntryRow.matrix, EntryRow.state
            )
            if name is not None:
                q = q.where(EntryRow.matrix == name)
            out: dict[str, dict[EntryState, int]] = {}
            for m, st, n in s.execute(q):
                out.setdefault(m, {})[EntryState(st)] = n
            return out

    def entries(
        self, name: str, states: Sequence[EntryState] | None = None, limit: int | None = None
    ) -> list[Entry]:
        with self._read() as s:
            q = select(EntryRow).where(EntryRow.matrix == name).order_by(EntryRow.id)
            if states:
                q = q.where(EntryRow.state.in_([st.value for st in states]))
            if limit is not None:
                q = q.limit(limit)
            return [entry_of(r) for r in s.scalars(q)]

    def entry(self, entry_id: int) -> Entry:
        with self._read() as s:
            row = s.get(EntryRow, entry_id)
            if row is None:
                raise SweepError(f"no matrix entry {entry_id}")
            return entry_of(row)

    def pending(self) -> int:
        """Entries queued or held (what keeps a scheduler busy)."""
        with self._read() as s:
            q = select(func.count()).where(EntryRow.state.in_([EntryState.QUEUED.value, *HELD]))
            return int(s.execute(q).scalar_one())

    # claims and leases ---------------------------------------------------------------------

    def claim(
        self,
        owner: str,
        limit: int,
        lease_s: float,
        matrices: Sequence[str] | None = None,
        scheduler: str = "",
    ) -> list[Entry]:
        """Up to ``limit`` queued entries whose time has come, highest priority first, now
        held by ``owner`` for ``lease_s``; each records ``scheduler`` (its name; default the
        owner) as its claimer."""
        now = time.time()
        pick = (
            select(EntryRow.id)
            .where(EntryRow.state == EntryState.QUEUED.value, EntryRow.not_before <= now)
            .order_by(EntryRow.priority.desc(), EntryRow.id)
            .limit(limit)
        )
        if matrices:
            pick = pick.where(EntryRow.matrix.in_(list(matrices)))
        if not self._sqlite:
            pick = pick.with_for_update(skip_locked=True)
        stmt = (
            update(EntryRow)
            .where(EntryRow.id.in_(pick.scalar_subquery()))
            .values(
                state=EntryState.CLAIMED.value,
                lease_owner=owner,
                lease_expires=now + lease_s,
                claims=EntryRow.claims + 1,
                scheduler=(scheduler or owner)[:NAME_CHARS],
                updated_at=now,
            )
            .returning(EntryRow)
            .execution_options(synchronize_session=False)
        )
        with self._write() as s:
            rows = [entry_of(r) for r in s.scalars(stmt)]
        return sorted(rows, key=lambda e: (-e.priority, e.id))

    def heartbeat(self, owner: str, lease_s: float, ids: Collection[int] | None = None) -> set[int]:
        """Extend the leases ``owner`` holds (only those of ``ids``, when given: an entry its
        scheduler no longer handles lapses and goes back to the queue); returns the ids it
        still holds (an entry missing from them was reaped, cancelled or taken: its holder
        must let it go)."""
        now = time.time()
        where = [EntryRow.lease_owner == owner, EntryRow.state.in_(HELD)]
        if ids is not None:
            if not ids:
                return set()
            where.append(EntryRow.id.in_(list(ids)))
        stmt = (
            update(EntryRow)
            .where(*where)
            .values(lease_expires=now + lease_s)
            .returning(EntryRow.id)
            .execution_options(synchronize_session=False)
        )
        with self._write() as s:
            return set(s.scalars(stmt))

    def reap(self) -> list[int]:
        """Return entries whose lease expired to the queue (their run, if any, is adopted by
        the next claimer)."""
        now = time.time()
        stmt = (
            update(EntryRow)
            .where(EntryRow.state.in_(HELD), EntryRow.lease_expires < now)
            .values(
                state=EntryState.QUEUED.value,
                lease_owner=None,
                lease_expires=None,
                not_before=now,
                updated_at=now,
                last_error="its scheduler stopped answering; queued again",
            )
            .returning(EntryRow.id)
            .execution_options(synchronize_session=False)
        )
        with self._write() as s:
            return list(s.scalars(stmt))

    def _guarded(
        self, s: Session, owner: str, entry_id: int, target: EntryState
    ) -> EntryRow | None:
        row = s.get(EntryRow, entry_id, with_for_update=True)
        if row is None or row.lease_owner != owner:
            return None  # not ours (any more): a late scheduler changes nothing
        if EntryState(row.state) not in TRANSITIONS[target]:
            return None
        row.state = target.value
        row.updated_at = time.time()
        return row

    def started(self, owner: str, entry_id: int) -> bool:
        """Its run was placed (or adopted): claimed → running."""
        with self._write() as s:
            row = self._guarded(s, owner, entry_id, EntryState.RUNNING)
            if row is not None and row.started_at is None:
                row.started_at = row.updated_at
            return row is not None

    def finish(self, owner: str, entry_id: int, state: EntryState, error: str = "") -> bool:
        """The entry ended (done or failed); False when ``owner`` no longer holds it."""
        assert state in (EntryState.DONE, EntryState.FAILED)
        with self._write() as s:
            row = self._guarded(s, owner, entry_id, state)
            if row is None:
                return False
            row.lease_owner = row.lease_expires = None
            row.ended_at = row.updated_at
            row.last_error = error[:2048]
            return True

    def release(self, owner: str, entry_id: int, not_before: float, why: str = "") -> bool:
        """Back to the queue from ``not_before`` on (nothing could place it now; its run waits
        for a retry); False when ``owner`` no longer holds it."""
        with self._write() as s:
            row = self._guarded(s, owner, entry_id, EntryState.QUEUED)
            if row is None:
                return False
            row.lease_owner = row.lease_expires = None
            row.not_before = not_before
            if why:
                row.last_error = why[:2048]
            return True

    # the user's -----------------------------------------------------------------------------

    def requeue(
        self, name: str, states: Sequence[EntryState], job_ids: Sequence[str] | None = None
    ) -> list[Entry]:
        """Final entries back to the queue, each under a new run id (its old run ended for
        good). Entries queued or held are left as they are."""
        movable = [st for st in states if st in REQUEUE_FROM]
        now = time.time()
        with self._write() as s:
            q = select(EntryRow).where(
                EntryRow.matrix == name, EntryRow.state.in_([st.value for st in movable])
            )
            if job_ids is not None:
                q = q.where(EntryRow.job_id.in_(list(job_ids)))
            rows = list(s.scalars(q.with_for_update()))
            for row in rows:
                row.state = EntryState.QUEUED.value
                row.not_before = 0.0
                row.run_id = new_run_id(f"{name}-{row.job_id}")
                row.started_at = row.ended_at = None
                row.updated_at = now
            return [entry_of(r) for r in rows]

    def cancel(self, name: str) -> list[Entry]:
        """Every live entry cancelled, in one transaction; returns each as it was before (those
        that were held have runs to stop). Their scheduler sees the entry gone at its next
        heartbeat."""
        now = time.time()
        with self._write() as s:
            live = [EntryState.QUEUED.value, *HELD]
            rows = list(
                s.scalars(
                    select(EntryRow)
                    .where(EntryRow.matrix == name, EntryRow.state.in_(live))
                    .with_for_update()
                )
            )
            was = [entry_of(r) for r in rows]
            for row in rows:
                row.state = EntryState.CANCELLED.value
                row.lease_owner = row.lease_expires = None
                row.updated_at = row.ended_at = now
            return was
