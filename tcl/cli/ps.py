"""``tcl ps [-a] [-w] [--json]``: runs and their states (non-final ones refreshed)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tcl.cli._common import err, out, print_json, with_control
from tcl.cli.render import age, iso, run_json
from tcl.cli.termsafe import cell, plain
from tcl.control.goodput import goodput, start_times
from tcl.control.states import RunState

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.table import Table

    from tcl.control.backends.base import NodePlace
    from tcl.control.goodput import RunPhases
    from tcl.control.service import Control
    from tcl.control.store import Attempt, Run


# a waiting run's reason, an ended one's cause, in the STATE column (--json has all of it)
WAIT_REASON_CHARS = 100


@dataclass(frozen=True)
class _Listing:
    runs: list[Run]
    unreachable_since: dict[str, float]  # run id -> first failed refresh (non-final runs)
    attempts: dict[str, list[Attempt]]  # run id -> its attempts, oldest first
    places: dict[tuple[str, int], list[NodePlace]]  # (run id, attempt) -> where its nodes ran
    phases: dict[str, RunPhases]  # run id -> its attempts' phases (tcl.control.phasestore)


async def _runs(
    ctl: Control, all_runs: bool, matrix: str | None = None, last: int | None = None
) -> _Listing:
    from tcl.control.lifecycle.refresh import refresh_many

    if matrix:
        runs = _matrix_runs(ctl, matrix)
        runs = runs if all_runs else [r for r in runs if not r.state.is_final]
        runs = runs[:last] if last is not None else runs
    else:
        runs = ctl.store.list_runs(include_final=all_runs, limit=last)
    fresh = await refresh_many(ctl, runs)
    shown = fresh if all_runs else [r for r in fresh if not r.state.is_final]
    since = ctl.store.unreachable_since([r.id for r in shown if not r.state.is_final])
    attempts = ctl.store.attempts_of([r.id for r in shown])
    phases = ctl.phases.of_runs([r.id for r in shown])
    return _Listing(shown, since, attempts, _places(attempts), phases)


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


def _table(listing: _Listing) -> Table:
    from rich.table import Table

    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("RUN", "NAME", "STATE", "HOST", "CHIPS", "CREATED", "GOODPUT", "COMMAND"):
        t.add_column(col, overflow="fold")
    for r in listing.runs:
        chips = r.request.chips
        chip = r.request.chip or ""
        state = state_text(r, listing.unreachable_since.get(r.id), listing.attempts.get(r.id, []))
        chips_text = f"{chips} {chip}".strip() if chips else "-"
        command = plain(r.request.command_text())[:60]
        good = goodput(r, listing.phases.get(r.id, {}))
        good_text = f"{good:.0%}" if good is not None else "-"
        shown = [r.id, r.name, state, r.host or "-", chips_text, age(r.created_at), good_text]
        shown.append(command)
        t.add_row(*(cell(text) for text in shown))  # names, commands, hosts: shown literally
    return t


def _json(r: Run, listing: _Listing) -> dict[str, Any]:
    since = listing.unreachable_since.get(r.id)
    phases = listing.phases.get(r.id, {})
    starts = {s.attempt: s for s in start_times(r, listing.attempts.get(r.id, []), phases)}
    attempts = [
        {
            "attempt": a.attempt,
            "host": a.host,
            "state": a.state.value,
            "cause": a.cause.value if a.cause is not None else None,
            "placed_at": iso(a.created_at),
            "started_at": iso(a.started_at) if a.started_at is not None else None,
            "ended_at": iso(a.ended_at) if a.ended_at is not None else None,
            "duration_s": round(a.duration_s, 3) if a.duration_s is not None else None,
            "pid": a.pid,
            # what its start took, in seconds, segment by segment (tcl.control.goodput)
            "start": [
                {"phase": g.name, "seconds": round(g.seconds, 3)}
                for g in starts[a.attempt].segments
            ],
            "to_first_step_s": _rounded(starts[a.attempt].to_first_step_s),
            "nodes": [
                {"host": p.host, "task": p.task, "accelerators": p.accelerators}
                for p in listing.places.get((r.id, a.attempt), [])
            ],
        }
        for a in listing.attempts.get(r.id, [])
    ]
    return {
        **run_json(r),
        "unreachable_since": iso(since) if since is not None else None,
        "attempts": attempts,
        "goodput": _rounded(goodput(r, phases)),
    }


def _rounded(x: float | None) -> float | None:
    return round(x, 3) if x is not None else None


def cmd_ps(
    ctx: typer.Context,
    all_runs: Annotated[bool, typer.Option("-a", "--all", help="Include finished runs.")] = False,
    watch: Annotated[bool, typer.Option("-w", "--watch", help="Refresh every 2 s.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON list (stable).")] = False,
    matrix: Annotated[
        str | None, typer.Option("--matrix", help="Only the runs of this matrix.")
    ] = None,
    last: Annotated[
        int | None, typer.Option("-n", "--last", min=1, help="Only the newest N (default: all).")
    ] = None,
) -> None:
    """List runs (active ones by default)."""
    if not watch:
        listing = with_control(ctx, lambda ctl: _runs(ctl, all_runs, matrix, last))
        if as_json:
            print_json([_json(r, listing) for r in listing.runs])
        elif listing.runs:
            out.print(_table(listing))
        else:
            err.print("no runs" + ("" if all_runs else " running (tcl ps -a for all)"))
        return
    try:
        from rich.live import Live

        with Live(console=out, auto_refresh=False) as live:
            while True:
                listing = with_control(ctx, lambda ctl: _runs(ctl, all_runs, matrix, last))
                live.update(_table(listing), refresh=True)
                time.sleep(2.0)
    except KeyboardInterrupt:
        return


def register(app: typer.Typer) -> None:
    app.command("ps")(cmd_ps)
