"""``tcl ps [-a] [-w] [--json]``: runs and their states (non-final ones refreshed)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Annotated

import typer
from rich.live import Live
from rich.table import Table

from tcl.cli._common import err, out, print_json, with_control
from tcl.cli.render import age, run_json
from tcl.control.follow import refresh
from tcl.control.service import Control

if TYPE_CHECKING:
    from tcl.control.store import Run


async def _runs(ctl: Control, all_runs: bool) -> list[Run]:
    runs = ctl.store.list_runs(include_final=all_runs)
    fresh = await asyncio.gather(*(refresh(ctl, r) for r in runs))
    return [r for r in fresh if all_runs or not r.state.is_final] if not all_runs else fresh


def _table(runs: list[Run]) -> Table:
    t = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("RUN", "NAME", "STATE", "HOST", "CHIPS", "CREATED", "COMMAND"):
        t.add_column(col, overflow="fold")
    for r in runs:
        chips = r.request.get("chips", 0)
        chip = r.request.get("chip") or ""
        state = r.state.value + (f" ({r.exit_code})" if r.exit_code not in (None, 0) else "")
        t.add_row(
            r.id, r.name, state, r.host or "-", f"{chips} {chip}".strip() if chips else "-",
            age(r.created_at), (" ".join(r.request.get("argv", []))
             or f"job {r.request.get('job') or ''}")[:60],
        )  # fmt: skip
    return t


def cmd_ps(
    ctx: typer.Context,
    all_runs: Annotated[bool, typer.Option("-a", "--all", help="Include finished runs.")] = False,
    watch: Annotated[bool, typer.Option("-w", "--watch", help="Refresh every 2 s.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON list (stable).")] = False,
) -> None:
    """List runs (active ones by default)."""
    if not watch:
        runs = with_control(ctx, lambda ctl: _runs(ctl, all_runs))
        if as_json:
            print_json([run_json(r) for r in runs])
        elif runs:
            out.print(_table(runs))
        else:
            err.print("no runs" + ("" if all_runs else " running (tcl ps -a for all)"))
        return
    try:
        with Live(console=out, auto_refresh=False) as live:
            while True:
                runs = with_control(ctx, lambda ctl: _runs(ctl, all_runs))
                live.update(_table(runs), refresh=True)
                time.sleep(2.0)
    except KeyboardInterrupt:
        return


def register(app: typer.Typer) -> None:
    app.command("ps")(cmd_ps)
