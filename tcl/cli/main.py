"""The ``tcl`` command: mounts one sub-module per command group; no logic here."""

from __future__ import annotations

from typing import Annotated

import typer

from tcl.cli import (
    checkpoints,
    hosts,
    jobs,
    logs,
    matrix,
    metrics,
    ps,
    repl,
    serve,
    ssh,
    stop,
    submit,
    sync,
    ui,
)
from tcl.cli._common import Globals

app = typer.Typer(
    name="tcl",
    help="Ship your code to the best free accelerators you can reach and run it there.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish)
    pretty_exceptions_show_locals=False,  # locals may hold secrets
)


def _print_version(value: bool) -> None:
    if value:
        from tcl import DISTRIBUTION, __version__

        typer.echo(f"tcl {__version__} ({DISTRIBUTION})")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    config: Annotated[
        str | None,
        typer.Option(
            "-c",
            "--config",
            help="Config file (default $TCL_CONFIG or "
            "~/.config/tcl/config.yaml; none at all = one local host).",
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print tcl's version and exit.",
        ),
    ] = False,
) -> None:
    ctx.obj = Globals(config_path=config)


submit.register(app)
logs.register(app)
metrics.register(app)
ps.register(app)
stop.register(app)
ssh.register(app)
hosts.register(app)
jobs.register(app)
serve.register(app)
checkpoints.register(app)
matrix.register(app)
repl.register(app)
sync.register(app)
ui.register(app)


def main() -> None:
    app()
