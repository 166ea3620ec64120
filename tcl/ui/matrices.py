"""``/api/matrices``: sweeps by state, one sweep's entries (its grid), requeueing its failures.

One matrix's detail is two queries of its entries (the progress summary's, and this grid's)
and one of their errors, whatever its size: a 1,200-entry sweep answers in tens of ms.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException

from tcl.control.errors import SweepError
from tcl.control.sweep.model import Entry, EntryState
from tcl.control.sweep.progress import last_line, summary
from tcl.ui.api import EntryItem, FailureItem, MatrixDetail, MatrixItem, RequeueResult
from tcl.ui.context import Ui, ui_of

router = APIRouter(prefix="/api/matrices", tags=["matrices"])
UiDep = Annotated[Ui, Depends(ui_of)]
_LIVE = (EntryState.QUEUED, EntryState.CLAIMED, EntryState.RUNNING)


def _counts(by_state: dict[EntryState, int]) -> dict[str, int]:
    return {st.value: by_state.get(st, 0) for st in EntryState}


@router.get("")
def list_matrices(ui: UiDep) -> list[MatrixItem]:
    counts = ui.queue.counts()
    out = []
    for m in ui.queue.matrices():
        c = _counts(counts.get(m.name, {}))
        out.append(
            MatrixItem(
                id=m.name, name=m.name, counts=c, total=sum(c.values()), created_at=m.created_at
            )
        )
    return out


def eta_from_durations(entries: list[Entry]) -> float | None:
    """When the summary has no rate yet: the mean time a finished entry took, times the
    entries left, over how many run at once now (at least one)."""
    took = [
        e.ended_at - e.started_at
        for e in entries
        if e.state is EntryState.DONE and e.started_at is not None and e.ended_at is not None
    ]
    left = sum(1 for e in entries if e.state in _LIVE)
    if not took or not left:
        return 0.0 if not left else None
    running = sum(1 for e in entries if e.state is EntryState.RUNNING)
    return sum(took) / len(took) * left / max(1, running)


def field_names(entries: list[Entry]) -> list[str]:
    """The manifest fields the entries carry (method, lang, run_kind…), first seen first."""
    seen: dict[str, None] = {}
    for e in entries:
        seen.update(dict.fromkeys(e.fields))
    return list(seen)


@router.get("/{matrix_id}")
def matrix_detail(ui: UiDep, matrix_id: str) -> MatrixDetail:
    try:
        s = summary(ui.queue, matrix_id)
    except SweepError:
        raise HTTPException(404, f"no matrix {matrix_id!r}") from None
    entries = ui.queue.entries(matrix_id)
    eta = s.eta_s if s.eta_s is not None else eta_from_durations(entries)
    return MatrixDetail(
        id=s.name,
        name=s.name,
        created_at=s.created_at,
        counts=_counts(s.counts),
        total=s.total,
        entries=[
            EntryItem(
                index=i,
                job_id=e.job_id,
                state=e.state.value,
                run_id=e.run_id,
                params=e.fields,
                error=last_line(e.last_error),
                started_at=e.started_at,
                ended_at=e.ended_at,
            )
            for i, e in enumerate(entries)
        ],
        runs_per_hour=s.runs_per_hour,
        eta_s=eta,
        failures=[
            FailureItem(job_id=f.job_id, run_id=f.run_id, ended_at=f.ended_at, error=f.error)
            for f in s.failures
        ],
        fields=field_names(entries),
    )


@router.post("/{matrix_id}/requeue")
async def requeue_failed(ui: UiDep, matrix_id: str) -> RequeueResult:
    """What `tcl matrix requeue NAME --failed` does: failed entries queued again, each as a
    new run, and a scheduler (`tcl serve`) made sure of."""
    ui.require_actions()
    try:
        ui.queue.matrix(matrix_id)
    except SweepError:
        raise HTTPException(404, f"no matrix {matrix_id!r}") from None
    moved = ui.queue.requeue(matrix_id, [EntryState.FAILED])
    if not moved:
        return RequeueResult(requeued=0, scheduler="nothing to do")
    if ui.start_scheduler is None:
        return RequeueResult(requeued=len(moved), scheduler="no scheduler started here")
    started = await asyncio.to_thread(ui.start_scheduler)  # may spawn `tcl serve`: seconds
    return RequeueResult(requeued=len(moved), scheduler=started)
