"""How far a matrix is: counts, rate, ETA and failures (:func:`summary`); and its entries in the
seed's ``matrix_status.json`` form (:func:`export`). Pure reads of the queue: one query for the
entries, one each for their runs and attempt counts, whatever the matrix's size.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tcl.control.backends.table import attempt_places
from tcl.control.sweep.model import Entry, EntryState
from tcl.control.sweep.queue import SweepQueue

RATE_WINDOW_S = 3600.0  # runs/hour counts the entries that ended in this last window
_MIN_WINDOW_S = 60.0  # a sweep younger than this is measured over this much (no wild rates)
FAILURES_SHOWN = 20
_LIVE = (EntryState.QUEUED, EntryState.CLAIMED, EntryState.RUNNING)
_ENDED = (EntryState.DONE, EntryState.FAILED)


@dataclass(frozen=True)
class Failure:
    job_id: str
    run_id: str | None
    ended_at: float | None
    error: str  # the last non-blank line of its last error ("" when none was kept)


@dataclass(frozen=True)
class MatrixSummary:
    name: str
    created_at: float
    counts: dict[EntryState, int]  # every state, zeros included
    total: int
    runs_per_hour: float  # entries done or failed per hour, over the last hour (see summary)
    eta_s: float | None  # until nothing is queued or held; None while there is no rate
    failures: list[Failure]  # newest first, at most FAILURES_SHOWN

    @property
    def ended(self) -> int:
        """Entries done or failed (the progress bar's filled part)."""
        return self.counts[EntryState.DONE] + self.counts[EntryState.FAILED]

    @property
    def remaining(self) -> int:
        """Entries queued, claimed or running."""
        return sum(self.counts[st] for st in _LIVE)

    @property
    def done_fraction(self) -> float:
        """Done of all entries (0 for an empty matrix)."""
        return self.counts[EntryState.DONE] / self.total if self.total else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "created_at": iso(self.created_at),
            "total": self.total,
            "counts": {st.value: n for st, n in self.counts.items()},
            "done_fraction": self.done_fraction,
            "runs_per_hour": self.runs_per_hour,
            "eta_s": self.eta_s,
            "failures": [
                {
                    "job_id": f.job_id,
                    "run_id": f.run_id,
                    "ended_at": iso(f.ended_at),
                    "error": f.error,
                }
                for f in self.failures
            ],
        }


def iso(ts: float | None) -> str | None:
    """ISO-8601 UTC to the second (``2026-06-17T22:48:00Z``), or None."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def last_line(error: str) -> str:
    """The last non-blank line of an error (a traceback's is the exception)."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _rate_per_hour(entries: list[Entry], now: float) -> float:
    """Entries that ended (done or failed) in the last hour, per hour. A sweep whose first
    entry started less than an hour ago is measured since then (at least a minute), so its
    first ETAs are not an hour's worth too slow."""
    starts = [e.started_at for e in entries if e.started_at is not None]
    if not starts:
        return 0.0
    window_s = min(RATE_WINDOW_S, max(_MIN_WINDOW_S, now - min(starts)))
    ended = sum(
        1
        for e in entries
        if e.state in _ENDED and e.ended_at is not None and now - window_s <= e.ended_at <= now
    )
    return ended * 3600.0 / window_s


def summary(queue: SweepQueue, name: str, now: float | None = None) -> MatrixSummary:
    """Where matrix ``name`` stands (``now`` for tests; the clock's by default)."""
    now = time.time() if now is None else now
    matrix = queue.matrix(name)  # an unknown name raises SweepError
    entries = queue.entries(name)
    counts = dict.fromkeys(EntryState, 0)
    for e in entries:
        counts[e.state] += 1
    rate = _rate_per_hour(entries, now)
    remaining = sum(counts[st] for st in _LIVE)
    eta_s = 0.0 if remaining == 0 else (remaining / rate * 3600.0 if rate > 0 else None)
    failed = sorted(
        (e for e in entries if e.state is EntryState.FAILED),
        key=lambda e: (e.ended_at or 0.0, e.id),
        reverse=True,
    )
    failures = [
        Failure(e.job_id, e.run_id, e.ended_at, last_line(e.last_error))
        for e in failed[:FAILURES_SHOWN]
    ]
    return MatrixSummary(name, matrix.created_at, counts, len(entries), rate, eta_s, failures)


def export(queue: SweepQueue, name: str) -> dict[str, dict[str, Any]]:
    """The seed's ``matrix_status.json``: per job_id (in the matrix's order) its state, run id,
    host (its run's, null before it is placed), the accelerators and tasks of its latest
    attempt, its job's pid there (the seed's ``pid``; null before its runner reported it),
    the scheduler that holds or ran it (the seed's ``pod``; null while queued), start and end
    (ISO-8601 UTC or null), attempts (of its current run) and last error."""
    queue.matrix(name)  # an unknown name raises SweepError
    entries = queue.entries(name)
    run_ids = [e.run_id for e in entries if e.run_id is not None]
    runs = queue.store.runs_by_id(run_ids)
    attempts = queue.store.attempts_of(run_ids)
    out: dict[str, dict[str, Any]] = {}
    for e in entries:
        run = runs.get(e.run_id) if e.run_id is not None else None
        atts = attempts.get(e.run_id, []) if run is not None and e.run_id else []
        places = attempt_places(atts[-1]) if atts else []
        out[e.job_id] = {
            "state": e.state.value,
            "run_id": e.run_id,
            "host": run.host if run is not None else None,
            # where its latest attempt ran: node 0's accelerators (the seed's `gpu`), every node
            "gpus": places[0].accelerators if places else [],
            "nodes": [p.task for p in places],
            "pid": atts[-1].pid if atts else None,
            # a queued entry's last claimer handed it back: nobody holds it now
            "scheduler": (e.scheduler or None) if e.state is not EntryState.QUEUED else None,
            "started_at": iso(e.started_at),
            "finished_at": iso(e.ended_at),
            "attempts": len(atts),
            "last_error": e.last_error,
        }
    return out
