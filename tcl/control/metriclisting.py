"""What ``tcl metrics`` shows: a run's metric points and each attempt's time to first step, as
typed records built where the store is open (the ``tcl serve`` daemon, or the CLI itself when no
daemon answers) and sent to the CLI over the daemon's socket. The CLI only prints them."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tcl.control.listingwire import Strict
from tcl.control.runlisting import StartSegment

if TYPE_CHECKING:
    from tcl.control.metricstore import MetricPoint
    from tcl.control.service import Control


class MetricsRequest(Strict):
    """``tcl metrics``'s arguments."""

    config_path: str
    config_named: bool
    run: str = ""  # a run id, prefix or name; empty: the newest run
    kind: str | None = None  # only points of this kind
    starts: bool = True  # each attempt's time to first step (with all kinds only)


class PointRecord(Strict):
    """One metric point; its stable ``--json`` form (docs/cli.md)."""

    seq: int
    attempt: int
    node: int
    ts: float
    step: int | None
    kind: str
    values: dict[str, float]


class StartRecord(Strict):
    """One attempt's time to first step: seconds by segment (WAITED, then each phase)."""

    attempt: int
    segments: list[StartSegment]  # WAITED, then each phase reached
    to_first_step_s: float | None

    def seconds(self, phase: str) -> float | None:
        return next((s.seconds for s in self.segments if s.phase == phase), None)


class MetricsListing(Strict):
    run_id: str
    notes: list[str]  # for stderr: which run, a host not reached
    points: list[PointRecord]
    starts: list[StartRecord] | None  # None: not asked for, or no attempt marked a phase
    goodput: float | None = None


def point_record(p: MetricPoint) -> PointRecord:
    return PointRecord(
        seq=p.seq,
        attempt=p.attempt,
        node=p.node,
        ts=p.ts,
        step=p.step,
        kind=p.kind,
        values=p.values,
    )


async def list_metrics(ctl: Control, req: MetricsRequest) -> MetricsListing:
    """Bring the run's events up to date (as ``tcl logs`` does), then read its points (and,
    with ``starts``, its attempts' start segments and goodput) from the store; the store's
    reads run off the event loop."""
    from tcl.control.catchup import catch_up, newest_run_id

    notes: list[str] = []
    ref = req.run
    if not ref:
        ref = await asyncio.to_thread(newest_run_id, ctl)
        notes.append(f"metrics of the most recent run, {ref}")
    caught = await catch_up(ctl, ref)
    if caught.unreachable:
        notes.append(f"warning: {caught.unreachable}; showing kept metrics")
    return await asyncio.to_thread(_read, ctl, req, caught.run_id, notes)


def _read(ctl: Control, req: MetricsRequest, run_id: str, notes: list[str]) -> MetricsListing:
    from tcl.control.catchup import keep_cached_metrics
    from tcl.control.goodput import goodput, start_times

    keep_cached_metrics(ctl, run_id)
    points = [point_record(p) for p in ctl.metrics.read_all(run_id, kind=req.kind)]
    listing = MetricsListing(run_id=run_id, notes=notes, points=points, starts=None)
    phases = ctl.phases.of_runs([run_id]).get(run_id) if req.starts and req.kind is None else None
    if phases:
        run = ctl.store.get_run(run_id)
        listing.starts = [
            StartRecord(
                attempt=st.attempt,
                segments=[StartSegment(phase=g.name, seconds=g.seconds) for g in st.segments],
                to_first_step_s=st.to_first_step_s,
            )
            for st in start_times(run, ctl.store.attempts(run_id), phases)
        ]
        listing.goodput = goodput(run, phases)
    return listing
