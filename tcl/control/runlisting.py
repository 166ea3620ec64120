"""What ``tcl ps`` shows of runs: one typed record per run (its stable ``--json`` form,
docs/cli.md) and its table row, built where the store is open (the ``tcl serve`` daemon, which
owns the runs, or the CLI itself when no daemon answers) and sent to the CLI over the daemon's
socket. The CLI only prints them: it needs neither the store nor the backends."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import Field

from tcl.control.listingwire import Strict
from tcl.control.states import RunState
from tcl.timestamps import iso

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tcl.control.backends.base import NodePlace
    from tcl.control.goodput import RunPhases
    from tcl.control.service import Control
    from tcl.control.store import Attempt, Run

# a waiting run's reason, an ended one's cause, in the STATE column (--json has all of it)
WAIT_REASON_CHARS = 100
COLUMNS = ("RUN", "NAME", "STATE", "HOST", "CHIPS", "CREATED", "GOODPUT", "COMMAND")


class ListRequest(Strict):
    """``tcl ps``'s flags."""

    config_path: str
    config_named: bool
    all_runs: bool = False  # ended runs too
    matrix: str | None = None  # only this matrix's runs
    last: int | None = Field(default=None, ge=1)  # only the newest N


class StartSegment(Strict):
    phase: str
    seconds: float


class NodeRecord(Strict):
    host: str
    task: str
    accelerators: list[int]


class AttemptRecord(Strict):
    attempt: int
    host: str
    state: str
    cause: str | None
    placed_at: str
    started_at: str | None
    ended_at: str | None
    duration_s: float | None
    pid: int | None
    start: list[StartSegment]  # what its start took, segment by segment (tcl.control.goodput)
    to_first_step_s: float | None
    nodes: list[NodeRecord]


class RunRecord(Strict):
    """A run as ``tcl ps --json`` prints it (stable: docs/cli.md)."""

    run_id: str
    name: str
    state: str
    host: str | None
    backend: str | None
    exit_code: int | None
    message: str
    argv: list[str]
    job: str | None  # a tcl.jobs key (`submit --job`), else null
    session: str | None  # "jupyter" (`tcl repl`), "remote"
    chip: str | None
    chips: int
    code_sha256: str | None
    created_at: str
    updated_at: str
    unreachable_since: str | None
    attempts: list[AttemptRecord]
    goodput: float | None


class RunRow(Strict):
    record: RunRecord
    cells: list[str]  # the table's row, one text per COLUMNS (shown literally)


class RunListing(Strict):
    rows: list[RunRow]


def age(ts: float) -> str:
    s = max(0.0, time.time() - ts)
    for unit, n in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= n:
            return f"{int(s // n)}{unit} ago"
    return f"{int(s)}s ago"


@dataclass(frozen=True)
class _Found:
    runs: list[Run]
    unreachable_since: dict[str, float]  # run id -> first failed refresh (non-final runs)
    attempts: dict[str, list[Attempt]]  # run id -> its attempts, oldest first
    places: dict[tuple[str, int], list[NodePlace]]  # (run id, attempt) -> where its nodes ran
    phases: dict[str, RunPhases]  # run id -> its attempts' phases (tcl.control.phasestore)


async def list_runs(ctl: Control, req: ListRequest) -> RunListing:
    """The runs ``req`` asks for, newest first, non-final ones refreshed from their hosts."""
    found = await _find(ctl, req)
    rows = [RunRow(record=_record(r, found), cells=_cells(r, found)) for r in found.runs]
    return RunListing(rows=rows)


async def _find(ctl: Control, req: ListRequest) -> _Found:
    """The store is read in a thread: in the daemon, a long listing must not hold up the
    event loop (its streams, its runs' controller). asyncio is imported here: a `tcl ps`
    that the daemon answers only reads this module's models."""
    import asyncio

    from tcl.control.lifecycle.refresh import refresh_many

    runs = await asyncio.to_thread(_selected, ctl, req)
    fresh = await refresh_many(ctl, runs)
    shown = fresh if req.all_runs else [r for r in fresh if not r.state.is_final]
    return await asyncio.to_thread(_found, ctl, shown)


def _selected(ctl: Control, req: ListRequest) -> list[Run]:
    if req.matrix:
        runs = _matrix_runs(ctl, req.matrix)
        runs = runs if req.all_runs else [r for r in runs if not r.state.is_final]
        return runs[: req.last] if req.last is not None else runs
    return ctl.store.list_runs(include_final=req.all_runs, limit=req.last)


def _found(ctl: Control, shown: list[Run]) -> _Found:
    since = ctl.store.unreachable_since([r.id for r in shown if not r.state.is_final])
    attempts = ctl.store.attempts_of([r.id for r in shown])
    phases = ctl.phases.of_runs([r.id for r in shown])
    return _Found(shown, since, attempts, _places(attempts), phases)


def _places(attempts: dict[str, list[Attempt]]) -> dict[tuple[str, int], list[NodePlace]]:
    """Where each attempt's nodes ran, from its handle."""
    from tcl.control.backends.table import attempt_places

    return {(a.run_id, a.attempt): attempt_places(a) for atts in attempts.values() for a in atts}


def _matrix_runs(ctl: Control, matrix: str) -> list[Run]:
    """The runs of a matrix's entries (those placed at least once), newest first."""
    from tcl.control.sweep.queue import SweepQueue

    queue = SweepQueue(ctl.store)
    try:
        queue.matrix(matrix)  # an unknown name is an error, not an empty list
        ids = [e.run_id for e in queue.entries(matrix) if e.run_id]
    finally:
        queue.close()
    return sorted(ctl.store.runs_by_id(ids).values(), key=lambda r: r.created_at, reverse=True)


def state_text(r: Run, unreachable_since: float | None, attempts: Sequence[Attempt] = ()) -> str:
    """The STATE column: the stored state, or ``unknown`` while its host cannot be reached;
    a run placed more than once says which attempt and why the one before ended."""
    return _state(r, unreachable_since) + _after(attempts)


def _after(attempts: Sequence[Attempt]) -> str:
    if len(attempts) < 2:
        return ""
    before = attempts[-2]
    after = f" after {before.cause.value.replace('_', ' ')}" if before.cause is not None else ""
    return f" · attempt {attempts[-1].attempt}{after}"


def _state(r: Run, unreachable_since: float | None) -> str:
    if unreachable_since is not None and not r.state.is_final:
        # how the job goes is unknown, not failed: its host is asked again until it answers
        since = age(unreachable_since).removesuffix(" ago")
        return f"unknown: tcl lost contact with host {r.host or '?'} {since} ago; retrying"
    why = r.message if len(r.message) <= WAIT_REASON_CHARS else r.message[:WAIT_REASON_CHARS] + "…"
    if r.state in (RunState.QUEUED, RunState.PENDING, RunState.WAITING_RETRY) and why:
        return f"{r.state.value}: {why}"  # why it waits (a scheduler's reason)
    if r.state in (RunState.FAILED, RunState.TERMINATED) and why:
        return f"{r.state.value}: {why}"  # why it ended: the job's last word, or tcl's
    return r.state.value + (f" ({r.exit_code})" if r.exit_code not in (None, 0) else "")


def _cells(r: Run, found: _Found) -> list[str]:
    from tcl.control.goodput import goodput

    chips = r.request.chips
    chip = r.request.chip or ""
    state = state_text(r, found.unreachable_since.get(r.id), found.attempts.get(r.id, []))
    chips_text = f"{chips} {chip}".strip() if chips else "-"
    good = goodput(r, found.phases.get(r.id, {}))
    good_text = f"{good:.0%}" if good is not None else "-"
    command = r.request.command_text()  # cut to fit where it is shown
    return [r.id, r.name, state, r.host or "-", chips_text, age(r.created_at), good_text, command]


def _record(r: Run, found: _Found) -> RunRecord:
    from tcl.control.goodput import goodput, start_times

    since = found.unreachable_since.get(r.id)
    phases = found.phases.get(r.id, {})
    atts = found.attempts.get(r.id, [])
    starts = {s.attempt: s for s in start_times(r, atts, phases)}
    attempts = [
        AttemptRecord(
            attempt=a.attempt,
            host=a.host,
            state=a.state.value,
            cause=a.cause.value if a.cause is not None else None,
            placed_at=iso(a.created_at),
            started_at=iso(a.started_at) if a.started_at is not None else None,
            ended_at=iso(a.ended_at) if a.ended_at is not None else None,
            duration_s=_rounded(a.duration_s),
            pid=a.pid,
            start=[
                StartSegment(phase=g.name, seconds=round(g.seconds, 3))
                for g in starts[a.attempt].segments
            ],
            to_first_step_s=_rounded(starts[a.attempt].to_first_step_s),
            nodes=[
                NodeRecord(host=p.host, task=p.task, accelerators=list(p.accelerators))
                for p in found.places.get((r.id, a.attempt), [])
            ],
        )
        for a in atts
    ]
    session = r.request.session
    return RunRecord(
        run_id=r.id,
        name=r.name,
        state=r.state.value,
        host=r.host,
        backend=r.backend,
        exit_code=r.exit_code,
        message=r.message,
        argv=list(r.request.argv),
        job=r.request.job,
        session=session.value if session else None,
        chip=r.request.chip,
        chips=r.request.chips,
        code_sha256=r.code_sha256,
        created_at=iso(r.created_at),
        updated_at=iso(r.updated_at),
        unreachable_since=iso(since) if since is not None else None,
        attempts=attempts,
        goodput=_rounded(goodput(r, phases)),
    )


def _rounded(x: float | None) -> float | None:
    return round(x, 3) if x is not None else None
