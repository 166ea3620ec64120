"""The ``tcl`` command's entry point: finds the command in argv and mounts only its module
(``tcl --version`` imports nothing but ``tcl``); no logic here."""

from __future__ import annotations

import os
import sys

# the root's options that take a value (tcl/cli/app.py's _root)
_VALUED = frozenset({"-c", "--config"})
# the commands handed to the warm fork server of ``tcl serve`` (tcl.cli.handoff): the ones that
# end on their own and read no terminal keys (ssh, repl, sync, ui, serve run here)
HANDED = frozenset(
    {"submit", "logs", "metrics", "ps", "stop", "hosts", "host", "checkpoints", "matrix"}
)


def command_of(args: list[str]) -> str | None:
    """The command ``args`` name, or None when the root itself is asked (``--help``,
    ``--version``, nothing)."""
    it = iter(args)
    for arg in it:
        if arg in _VALUED:
            next(it, None)
        elif arg.startswith("-"):
            if arg in ("--help", "--version", "--install-completion", "--show-completion"):
                return None
        else:
            return arg
    return None


def main() -> None:
    args = sys.argv[1:]
    command = command_of(args)
    if command in HANDED and "_TCL_COMPLETE" not in os.environ:
        from tcl.cli.handoff import handed_off

        code = handed_off(args)  # run by the warm fork server of tcl serve
        if code is not None:
            sys.exit(code)
    run_here(args)


def run_here(args: list[str]) -> None:
    """The command in this process (the fork server's child runs this, never :func:`main`:
    it would hand the command to its own server again)."""
    command = command_of(args)
    if command is None and "--version" in args and "--help" not in args:
        from tcl import DISTRIBUTION, __version__

        print(f"tcl {__version__} ({DISTRIBUTION})")
        return
    if "_TCL_COMPLETE" in os.environ:  # shell completion needs every command
        command = None
    from tcl.cli.app import build

    build(command)(args=args, prog_name="tcl")
