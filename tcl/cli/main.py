"""The ``tcl`` command's entry point: finds the command in argv and mounts only its module
(``tcl --version`` imports nothing but ``tcl``); no logic here."""

from __future__ import annotations

import os
import sys

# the root's options that take a value (tcl/cli/app.py's _root)
_VALUED = frozenset({"-c", "--config"})


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
    if command is None and "--version" in args and "--help" not in args:
        from tcl import DISTRIBUTION, __version__

        print(f"tcl {__version__} ({DISTRIBUTION})")
        return
    if "_TCL_COMPLETE" in os.environ:  # shell completion needs every command
        command = None
    from tcl.cli.app import build

    build(command)()
