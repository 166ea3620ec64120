"""``tcl serve``: the workstation's local agent, in the foreground (``tcl submit`` starts one
in the background by itself when none runs)."""

from __future__ import annotations

from typing import Annotated

import typer

from tcl.cli._common import err, fail, print_json


def cmd_serve(
    idle_exit_s: Annotated[
        float, typer.Option("--idle-exit-s", min=0, help="Exit after this long idle (0: never).")
    ] = 0.0,
    stop: Annotated[bool, typer.Option("--stop", help="Stop the running daemon.")] = False,
    status: Annotated[bool, typer.Option("--status", help="Print its status as JSON.")] = False,
    no_scheduler: Annotated[
        bool, typer.Option("--no-scheduler", help="Do not claim matrix entries.")
    ] = False,
    lease_s: Annotated[
        float | None,
        typer.Option(
            "--lease-s",
            min=1,
            help="A silent daemon's runs and matrix entries go to the next one after this long "
            "(default: $TCL_SERVE_LEASE_S or 30).",
        ),
    ] = None,
    heartbeat_s: Annotated[
        float | None,
        typer.Option(
            "--heartbeat-s",
            min=0.1,
            help="How often leases are renewed (default: a third of --lease-s, at most 5).",
        ),
    ] = None,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Entries claimed at once.")] = 16,
    name: Annotated[
        str,
        typer.Option(
            "--name",
            help="The name each matrix entry it claims records, shown by matrix status/export "
            "(default: $TCL_SCHEDULER_NAME or this machine's hostname).",
        ),
    ] = "",
) -> None:
    """Keep SSH connections warm, run submits, and schedule matrix entries (one daemon per
    state dir; several, on machines sharing $TCL_DB_URL, share a sweep)."""
    from tcl.control.daemon.client import running_daemon, stop_daemon

    if stop:
        err.print("stopped" if stop_daemon() else "no tcl serve was running", markup=False)
        return
    if status:
        client = running_daemon()
        if client is None:
            raise fail("no tcl serve is running for this state dir")
        print_json(client.status().model_dump(mode="json"))
        return
    from tcl.control.daemon.server import main

    argv = ["--idle-exit-s", str(idle_exit_s), "--batch", str(batch), "--name", name]
    if lease_s is not None:
        argv += ["--lease-s", str(lease_s)]
    if heartbeat_s is not None:
        argv += ["--heartbeat-s", str(heartbeat_s)]
    code = main(argv + (["--no-scheduler"] if no_scheduler else []))
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("serve")(cmd_serve)
