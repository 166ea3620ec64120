"""``tcl metrics RUN [--json] [--kind K]``: the metric points a run's job printed.

A job prints ``TCL_METRIC {json}`` lines on stdout (``tcl.jobs`` trainers do); the runner keeps
them as metric events and every pull keeps them in the state store. This command brings the
run's events up to date first (as ``tcl logs`` does), then shows what the store holds, and
each attempt's time to first step by phase with the run's goodput (``tcl.control.goodput``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from tcl.cli._common import err, out, print_json, with_control

if TYPE_CHECKING:
    from rich.table import Table

    from tcl.control.metricstore import MetricPoint
    from tcl.control.service import Control


def point_json(p: MetricPoint) -> dict[str, Any]:
    """The stable JSON form of a point (documented in docs/cli.md)."""
    return {
        "seq": p.seq,
        "attempt": p.attempt,
        "node": p.node,
        "ts": p.ts,
        "step": p.step,
        "kind": p.kind,
        "values": p.values,
    }


def _table(points: list[MetricPoint]) -> Table:
    from rich.table import Table

    names = sorted({name for p in points for name in p.values})
    nodes = len({p.node for p in points}) > 1  # a multi-node run: say whose point it is
    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("STEP", "KIND", *(["NODE"] if nodes else [])):
        t.add_column(col, justify="right" if col != "KIND" else "left")
    for name in names:
        t.add_column(name, justify="right", overflow="fold")
    for p in points:
        cells = [str(p.step) if p.step is not None else "", p.kind]
        cells += [str(p.node)] if nodes else []
        cells += [f"{p.values[n]:.6g}" if n in p.values else "" for n in names]
        t.add_row(*cells)
    return t


def cmd_metrics(
    ctx: typer.Context,
    run_ref: Annotated[
        str | None,
        typer.Argument(metavar="[RUN]", help="Run id, prefix or name (default: the newest run)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="A JSON list of points.")] = False,
    kind: Annotated[
        str | None, typer.Option("--kind", help="Only points of this kind (train, val, …).")
    ] = None,
) -> None:
    """Show the metric points of a run (its job's TCL_METRIC lines), in the order printed."""

    async def body(ctl: Control) -> tuple[str, list[MetricPoint], Table | None]:
        from tcl.control.catchup import catch_up, keep_cached_metrics, newest_run_id

        ref = run_ref
        if ref is None:
            ref = newest_run_id(ctl)
            err.print(f"metrics of the most recent run, {ref}", markup=False)
        caught = await catch_up(ctl, ref)
        if caught.unreachable:
            err.print(f"warning: {caught.unreachable}; showing kept metrics", markup=False)
        keep_cached_metrics(ctl, caught.run_id)
        points = ctl.metrics.read_all(caught.run_id, kind=kind)
        # the whole run's start and goodput: shown with all its points, not one kind's
        starts = None if as_json or kind is not None else _start_table(ctl, caught.run_id)
        return caught.run_id, points, starts

    run_id, points, starts = with_control(ctx, body)
    if not points:
        of_kind = f" of kind {kind!r}" if kind is not None else ""
        err.print(
            f"run {run_id} has no metric points{of_kind} (a job prints them as "
            "TCL_METRIC lines on stdout)",
            markup=False,
        )
    if as_json:
        print_json([point_json(p) for p in points])
    elif points:
        out.print(_table(points))
    if starts is not None:
        out.print(starts)


def _start_table(ctl: Control, run_id: str) -> Table | None:
    """Each attempt's time to first step, in seconds by phase, and the run's goodput (None:
    no attempt marked a phase)."""
    from rich.table import Table

    from tcl.control.goodput import goodput, start_times

    phases = ctl.phases.of_runs([run_id]).get(run_id)
    if not phases:
        return None
    run = ctl.store.get_run(run_id)
    starts = start_times(run, ctl.store.attempts(run_id), phases)
    names = list(dict.fromkeys(g.name for st in starts for g in st.segments))
    good = goodput(run, phases)
    title = "time to first step (s)" + (f"; goodput {good:.1%}" if good is not None else "")
    t = Table(title=title, title_justify="left", box=None, header_style="bold", pad_edge=False)
    for col in ("ATTEMPT", *names, "TOTAL"):
        t.add_column(col, justify="right")
    for st in starts:
        cells = [f"{x:.2f}" if (x := st.seconds(n)) is not None else "" for n in names]
        total = st.to_first_step_s
        t.add_row(str(st.attempt), *cells, f"{total:.2f}" if total is not None else "")
    return t


def register(app: typer.Typer) -> None:
    app.command("metrics")(cmd_metrics)
