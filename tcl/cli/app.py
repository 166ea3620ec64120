"""The ``tcl`` Typer app: its root options and the commands, each mounted from the module that
registers it. ``build(command)`` mounts only that command's module, so a run imports what its
command needs and nothing else; ``build()`` mounts them all (help, completion)."""

from __future__ import annotations

import functools
import importlib
from typing import Annotated

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from tcl.cli._common import Globals

# command name -> the module under tcl.cli whose ``register(app)`` mounts it (in help's order)
COMMANDS: dict[str, str] = {
    "submit": "submit",
    "logs": "logs",
    "metrics": "metrics",
    "ps": "ps",
    "stop": "stop",
    "ssh": "ssh",
    "hosts": "hosts",
    "host": "hosts",
    "jobs": "jobs",
    "run": "jobs",
    "serve": "serve",
    "checkpoints": "checkpoints",
    "matrix": "matrix",
    "repl": "repl",
    "sync": "sync",
    "ui": "ui",
}


def _print_version(value: bool) -> None:
    if value:
        from tcl import DISTRIBUTION, __version__

        typer.echo(f"tcl {__version__} ({DISTRIBUTION})")
        raise typer.Exit()


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


class PlainHelpGroup(TyperGroup):
    """The root group, its help without typer's type labels (``<str>``, ``<int range>``): an
    option that takes a value shows its name (``--chip CHIP``), an argument its own."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]  # click's own signature
        _plain_metavars(self)


def _plain_metavars(cmd: TyperCommand | TyperGroup) -> None:
    for p in cmd.params:
        if p.metavar is not None or not p.name:
            continue
        takes_value = isinstance(p, TyperOption) and not p.is_flag and not p.count
        if takes_value or isinstance(p, TyperArgument):
            p.metavar = p.name.upper()
    if isinstance(cmd, TyperGroup):
        for sub in cmd.commands.values():
            if isinstance(sub, TyperCommand | TyperGroup):
                _plain_metavars(sub)


@functools.cache
def build(command: str | None = None) -> typer.Typer:
    """The app with ``command``'s module mounted, or every module when ``command`` is None or
    not one of :data:`COMMANDS` (typer then names the unknown command)."""
    app = typer.Typer(
        name="tcl",
        help="Ship your code to the best free accelerators you can reach and run it there.",
        no_args_is_help=True,
        add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish)
        pretty_exceptions_show_locals=False,  # locals may hold secrets
        rich_markup_mode=None,
        cls=PlainHelpGroup,
    )
    app.callback()(_root)
    wanted = COMMANDS.get(command or "")
    modules = [wanted] if wanted else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        importlib.import_module(f"tcl.cli.{name}").register(app)
    return app


def __getattr__(name: str) -> typer.Typer:
    # ``from tcl.cli.app import app``: the whole app (tests drive it with typer's CliRunner)
    if name == "app":
        return build()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
