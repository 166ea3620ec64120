"""``tcl stop [RUN]``: SIGTERM the job, SIGKILL after the grace, free its accelerators.

Through the ``tcl serve`` daemon when one answers (it owns the run); with none, from here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from tcl.cli._common import err, fail, globals_of, with_control
from tcl.control.errors import DaemonError, TclError

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
    from tcl.control.daemon.client import answering_daemon

    client = answering_daemon()
    if client is not None:
        from tcl.control.daemon.api import StopRequest

        path, named = globals_of(ctx).config_location()
        req = StopRequest(
            config_path=path,
            config_named=named,
            run=run_ref or "",
            grace_s=grace_s,
        )
        try:
            end = client.stop(req)
        except DaemonError:
            pass  # it went away or broke: stopped from here, as with no daemon
        except TclError as e:
            raise fail(str(e), e.exit_code) from None
        else:
            err.print(f"run {end.run_id} {end.state}", markup=False)
            return

    async def go(ctl: Control) -> Run:
        from tcl.control.lifecycle.stop import only_active_run_id, stop

        run_id = run_ref if run_ref is not None else only_active_run_id(ctl)
        return await stop(ctl, ctl.store.resolve(run_id), grace_s)

    run = with_control(ctx, go)
    err.print(f"run {run.id} {run.state.value}", markup=False)


def register(app: typer.Typer) -> None:
    app.command("stop")(cmd_stop)
