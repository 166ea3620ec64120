"""``tcl stop [RUN]``: SIGTERM the job, SIGKILL after the grace, free its accelerators."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tcl.cli._common import err, only_active_run_id, with_control

if TYPE_CHECKING:
    from tcl.control.service import Control
    from tcl.control.store import Run


def cmd_stop(
    ctx: typer.Context,
    run_ref: Annotated[
        str | None,
        typer.Argument(
            metavar="[RUN]", help="Run id, prefix or name (default: the one active run)."
        ),
    ] = None,
    grace_s: Annotated[
        float, typer.Option("--grace", min=0, help="Seconds before SIGKILL.")
    ] = 10.0,
) -> None:
    """Stop a run."""

    async def go(ctl: Control) -> Run:
        from tcl.control.lifecycle.stop import stop

        run_id = run_ref if run_ref is not None else only_active_run_id(ctl)
        return await stop(ctl, ctl.store.resolve(run_id), grace_s)

    run = with_control(ctx, go)
    err.print(f"run {run.id} {run.state.value}", markup=False)


def register(app: typer.Typer) -> None:
    app.command("stop")(cmd_stop)
