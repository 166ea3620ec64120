"""``tcl ps [-a] [-w] [--json]``: runs and their states (non-final ones refreshed).

The listing comes from the ``tcl serve`` daemon when one answers (it holds the store open and
owns the runs: this command then imports neither the store nor the backends); with none, the
CLI builds the same listing itself (:mod:`tcl.control.runlisting`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

from tcl.cli._common import err, globals_of, out, print_json, served_or_here, with_control
from tcl.cli.termsafe import cell, plain
from tcl.control.runlisting import COLUMNS, ListRequest, RunListing, list_runs

if TYPE_CHECKING:
    from rich.table import Table

COMMAND_CHARS = 60  # the COMMAND column (--json has all of it)


def _listing(ctx: typer.Context, req: ListRequest) -> RunListing:
    """From the daemon when one answers; else built here."""
    return served_or_here(
        lambda client: client.list_runs(req),
        lambda: with_control(ctx, lambda ctl: list_runs(ctl, req)),
    )


def _table(listing: RunListing) -> Table:
    from rich.table import Table

    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in COLUMNS:
        t.add_column(col, overflow="fold")
    for row in listing.rows:
        *shown, command = row.cells
        shown.append(plain(command)[:COMMAND_CHARS])
        t.add_row(*(cell(text) for text in shown))  # names, commands, hosts: shown literally
    return t


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

    path, named = globals_of(ctx).config_location()
    req = ListRequest(
        config_path=path,
        config_named=named,
        all_runs=all_runs,
        matrix=matrix,
        last=last,
    )
    if not watch:
        listing = _listing(ctx, req)
        if as_json:
            print_json([row.record.model_dump(mode="json") for row in listing.rows])
        elif listing.rows:
            out.print(_table(listing))
        else:
            err.print("no runs" + ("" if all_runs else " running (tcl ps -a for all)"))
        return
    try:
        from rich.live import Live

        with Live(console=out.console, auto_refresh=False) as live:
            while True:
                live.update(_table(_listing(ctx, req)), refresh=True)
                time.sleep(2.0)
    except KeyboardInterrupt:
        return


def register(app: typer.Typer) -> None:
    app.command("ps")(cmd_ps)
