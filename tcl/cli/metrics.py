"""``tcl metrics RUN [--json] [--kind K]``: the metric points a run's job printed.

A job prints ``TCL_METRIC {json}`` lines on stdout (``tcl.jobs`` trainers do); the runner keeps
them as metric events and every pull keeps them in the state store. This command brings the
run's events up to date first (as ``tcl logs`` does), then shows what the store holds, and
each attempt's time to first step by phase with the run's goodput (``tcl.control.goodput``).
The ``tcl serve`` daemon reads them when one answers (this command then opens no store);
with none, the CLI reads them itself (:mod:`tcl.control.metriclisting`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from tcl.cli._common import err, globals_of, out, print_json, served_or_here, with_control
from tcl.control.metriclisting import MetricsListing, MetricsRequest, PointRecord, list_metrics

if TYPE_CHECKING:
    from rich.table import Table


def point_json(p: PointRecord) -> dict[str, Any]:
    """The stable JSON form of a point (documented in docs/cli.md)."""
    return p.model_dump(mode="json")


def _table(points: list[PointRecord]) -> Table:
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


def _listing(ctx: typer.Context, req: MetricsRequest) -> MetricsListing:
    """From the daemon when one answers (it holds the store open); else built here."""
    return served_or_here(
        lambda client: client.list_metrics(req),
        lambda: with_control(ctx, lambda ctl: list_metrics(ctl, req)),
    )


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
    path, named = globals_of(ctx).config_location()
    # the whole run's start and goodput: shown with all its points, not one kind's
    req = MetricsRequest(
        config_path=path, config_named=named, run=run_ref or "", kind=kind, starts=not as_json
    )
    listing = _listing(ctx, req)
    for note in listing.notes:
        err.print(note, markup=False)
    if not listing.points:
        of_kind = f" of kind {kind!r}" if kind is not None else ""
        err.print(
            f"run {listing.run_id} has no metric points{of_kind} (a job prints them as "
            "TCL_METRIC lines on stdout)",
            markup=False,
        )
    if as_json:
        print_json([point_json(p) for p in listing.points])
    elif listing.points:
        out.print(_table(listing.points))
    if listing.starts:
        out.print(_start_table(listing))


def _start_table(listing: MetricsListing) -> Table:
    """Each attempt's time to first step, in seconds by phase, and the run's goodput."""
    from rich.table import Table

    starts = listing.starts or []
    names = list(dict.fromkeys(g.phase for st in starts for g in st.segments))
    good = listing.goodput
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
