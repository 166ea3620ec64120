"""Run leases: which controller owns a run now (a row per owned run, in the state store).

One controller at a time advances a run (pulls its events, moves its state, places it again,
frees its host); it holds the run's lease and renews it while it lives. A controller that dies
stops renewing: once the lease expires any other controller on the same store (the restarted
daemon, another daemon on a shared PostgreSQL, a ``TCL_SERVE=0`` command) takes it and carries
on from what the store and the log cache hold. Taking is one guarded statement per run (an
update of an expired row, else an insert the primary key lets only one writer make), so two
controllers never both win.

Its own table, so a store made before it gains it with ``create_all`` (no migration).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import Float, ForeignKey, String, delete, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from tcl.control.errors import StoreError
from tcl.control.store import Store, TableBase


class RunLeaseRow(TableBase):
    __tablename__ = "tcl_run_leases"

    run_id: Mapped[str] = mapped_column(ForeignKey("tcl_runs.id"), primary_key=True)
    owner: Mapped[str] = mapped_column(String(128), index=True)
    expires_at: Mapped[float] = mapped_column(Float)


@dataclass(frozen=True)
class Lease:
    run_id: str
    owner: str
    expires_at: float

    def live(self, now: float | None = None) -> bool:
        return self.expires_at > (time.time() if now is None else now)


class RunLeases:
    def __init__(self, store: Store) -> None:
        self.store = store
        store.ensure_tables()

    def take(self, owner: str, run_id: str, lease_s: float) -> bool:
        """Own the run for ``lease_s`` from now: True when it was free, expired or ours."""
        now = time.time()
        with self.store.session() as s:
            stmt = (
                update(RunLeaseRow)
                .where(
                    RunLeaseRow.run_id == run_id,
                    or_(RunLeaseRow.owner == owner, RunLeaseRow.expires_at <= now),
                )
                .values(owner=owner, expires_at=now + lease_s)
                .execution_options(synchronize_session=False)
            )
            if s.execute(stmt).rowcount == 1:  # type: ignore[attr-defined]
                return True
            if s.get(RunLeaseRow, run_id) is not None:
                return False  # another owner's, and live
        try:
            with self.store.session() as s:
                s.add(RunLeaseRow(run_id=run_id, owner=owner, expires_at=now + lease_s))
        except StoreError as e:
            if isinstance(e.__context__, IntegrityError) or "IntegrityError" in str(e):
                return False  # another controller inserted it first
            raise
        return True

    def renew(self, owner: str, run_ids: Collection[str], lease_s: float) -> set[str]:
        """Extend the leases of ``run_ids`` still held by ``owner``; the ones it still holds
        (a run missing was taken by another controller after its lease expired)."""
        if not run_ids:
            return set()
        now = time.time()
        ids = list(run_ids)
        with self.store.session() as s:
            s.execute(
                update(RunLeaseRow)
                .where(
                    RunLeaseRow.owner == owner,
                    RunLeaseRow.run_id.in_(ids),
                    RunLeaseRow.expires_at > now,
                )
                .values(expires_at=now + lease_s)
                .execution_options(synchronize_session=False)
            )
            held = s.scalars(
                select(RunLeaseRow.run_id).where(
                    RunLeaseRow.owner == owner,
                    RunLeaseRow.run_id.in_(ids),
                    RunLeaseRow.expires_at > now,
                )
            )
            return set(held)

    def drop(self, owner: str, run_id: str) -> None:
        """Give the run up (it ended and its host is freed, or its owner stops)."""
        with self.store.session() as s:
            s.execute(
                delete(RunLeaseRow).where(RunLeaseRow.run_id == run_id, RunLeaseRow.owner == owner)
            )

    def of(self, run_ids: Collection[str]) -> dict[str, Lease]:
        """The leases of these runs that exist (live or expired)."""
        if not run_ids:
            return {}
        with self.store.session() as s:
            rows = s.scalars(select(RunLeaseRow).where(RunLeaseRow.run_id.in_(list(run_ids))))
            return {r.run_id: Lease(r.run_id, r.owner, r.expires_at) for r in rows}
