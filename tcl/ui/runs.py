"""``/api/runs``: the runs table, one run, its metrics, and stopping it."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query

from tcl.control.errors import RunNotFoundError, TclError
from tcl.control.goodput import goodput, start_times
from tcl.control.metricstore import READ_LIMIT
from tcl.control.states import RunState
from tcl.control.store import Run
from tcl.ui.api import MetricPage, MetricPointItem, RunDetail, RunList, RunOrder, StopResult
from tcl.ui.context import Ui, ui_of
from tcl.ui.runitems import attempt_item, run_item

router = APIRouter(prefix="/api/runs", tags=["runs"])
UiDep = Annotated[Ui, Depends(ui_of)]
MAX_PAGE = 10_000
METRICS_PAGE = 20_000
# what the page leads with: the runs to look at now (the running), then those to look into
FIRST = (RunState.RUNNING, RunState.PROVISIONING, RunState.FAILED)


def get_run(ui: Ui, run_id: str) -> Run:
    try:
        return ui.store.get_run(run_id)
    except RunNotFoundError:
        raise HTTPException(404, f"no run {run_id!r}") from None


@router.get("")
def list_runs(
    ui: UiDep,
    state: str = "",
    q: str = "",
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 5000,
    offset: Annotated[int, Query(ge=0)] = 0,
    order: RunOrder = RunOrder.RECENT,
) -> RunList:
    try:
        wanted = RunState(state) if state else None
    except ValueError:
        known = ", ".join(s.value for s in RunState)
        raise HTTPException(422, f"state {state!r}: one of {known}") from None
    first = FIRST if order is RunOrder.ATTENTION else ()
    runs, total = ui.store.search_runs(wanted, q.strip(), limit, offset, first)
    attempts = ui.store.attempts_of([r.id for r in runs])  # a few queries for thousands
    counts = ui.store.count_by_state()
    now = time.time()
    return RunList(
        runs=[run_item(r, attempts.get(r.id, ()), now, ui.places.nodes) for r in runs],
        total=total,
        counts={st.value: counts.get(st, 0) for st in RunState},
    )


@router.get("/{run_id}")
async def run_detail(ui: UiDep, run_id: str) -> RunDetail:
    run = get_run(ui, run_id)
    attempts = ui.store.attempts(run.id)
    nodes = 1
    if attempts and attempts[-1].handle:
        try:
            async with ui.control() as ctl:
                nodes = ctl.handle(attempts[-1]).node_count
        except (TclError, ValueError):  # an unknown backend, an old handle: one node shown
            nodes = 1
    phases = ui.phases.of_runs([run.id]).get(run.id, {})
    starts = {st.attempt: st for st in start_times(run, attempts, phases) if len(st.segments) > 1}
    return RunDetail(
        run=run_item(run, attempts),
        request=run.request.model_dump(mode="json"),
        attempts=[attempt_item(a, starts.get(a.attempt)) for a in attempts],
        nodes=nodes,
        goodput=goodput(run, phases),
    )


@router.get("/{run_id}/metrics")
def run_metrics(
    ui: UiDep,
    run_id: str,
    after: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=READ_LIMIT)] = METRICS_PAGE,
) -> MetricPage:
    run = get_run(ui, run_id)
    points = ui.metrics.read(run.id, after, limit)
    return MetricPage(
        points=[
            MetricPointItem(
                seq=p.seq, step=p.step, kind=p.kind, node=p.node, ts=p.ts, values=p.values
            )
            for p in points
        ],
        next=points[-1].seq if points else after,
        more=len(points) >= limit,
    )


@router.post("/{run_id}/stop")
async def stop_run(ui: UiDep, run_id: str) -> StopResult:
    """What `tcl stop` does: SIGTERM, SIGKILL after the grace, free its accelerators."""
    ui.require_actions()
    from tcl.control.lifecycle.stop import stop

    run = get_run(ui, run_id)
    # its viewers' follow waits meanwhile: two pulls at once would keep lines twice
    async with ui.feeds.paused(run.id), ui.control() as ctl:
        stopped = await stop(ctl, run, ui.settings.stop_grace_s)
    return StopResult(run=run_item(stopped, ui.store.attempts(stopped.id)))
