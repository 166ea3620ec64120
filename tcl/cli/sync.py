"""``tcl sync [RUN] [--watch]``: push the working tree's change to a session's runner."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from tcl.cli._common import err, print_json, with_control

if TYPE_CHECKING:
    from tcl.control.service import Control


def cmd_sync(
    ctx: typer.Context,
    run_ref: Annotated[
        str | None,
        typer.Argument(
            metavar="[RUN]",
            help="Run id, prefix or name (default: the newest session started from this repo).",
        ),
    ] = None,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Push on every save.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Send the change since the session's base (edits, new and deleted files, renames, modes);
    the runner applies all of it or, when its tree changed under it, none."""

    async def go(ctl: Control) -> None:
        from tcl.control import syncing

        run_id = (
            ctl.store.resolve(run_ref).id if run_ref else syncing.latest_session(ctl, Path.cwd())
        )
        if watch:
            err.print(
                f"watching for changes to sync to run {run_id} (Ctrl-C to stop)", markup=False
            )
            await syncing.watch(ctl, run_id, lambda t: err.print(t, markup=False))
            return
        s = await syncing.sync_once(ctl, run_id)
        if as_json:
            print_json(
                {
                    "run_id": run_id,
                    "paths": s.paths,
                    "modules": s.modules,
                    "elapsed_s": round(s.elapsed_s, 4),
                    "already": s.already,
                }
            )
        else:
            err.print(f"run {run_id}: {syncing.describe(s)}", markup=False)

    try:
        with_control(ctx, go)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def register(app: typer.Typer) -> None:
    app.command("sync")(cmd_sync)
