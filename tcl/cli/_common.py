"""Shared CLI plumbing: options object, consoles, async runner, one-line errors."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

import typer

from tcl.control.errors import TclError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status

T = TypeVar("T")

# A table piped into a file or another program is as wide as its rows: rich would fold it at
# 80 columns, splitting run ids and checkpoint paths. $COLUMNS still wins.
PIPED_WIDTH = 100_000


def console(stderr: bool = False, file: TextIO | None = None) -> Console:
    """rich honours NO_COLOR itself; stderr carries progress, warnings and errors."""
    from rich.console import Console

    stream = file or (sys.stderr if stderr else sys.stdout)
    piped = not stream.isatty() and not os.environ.get("COLUMNS")
    return Console(
        file=file,
        stderr=stderr,
        highlight=False,
        soft_wrap=True,
        width=PIPED_WIDTH if piped else None,
    )


# what rich's Text drops from plain text (rich.control.STRIP_CONTROL_CODES): BEL, BS, VT, FF, CR
_STRIPPED = dict.fromkeys((7, 8, 11, 12, 13))
# what makes rich take a stream that is not a terminal for one
_TERMINAL_VARS = ("FORCE_TERMINAL", "TTY_COMPATIBLE", "FORCE_COLOR", "TTY_INTERACTIVE")


class LazyConsole:
    """A rich ``Console`` made on first need. rich costs ~25 ms to import, which a followed
    submit paid before its first line: its own lines (plain text, ``markup=False``) are
    written as rich writes them (its control characters dropped, tabs expanded, no wrapping)
    while the stream is not a terminal and nothing else asked for the console."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            self._console = console(stderr=self._stderr)
        return self._console

    @property
    def file(self) -> TextIO:
        return sys.stderr if self._stderr else sys.stdout

    def _plain(self) -> bool:
        """No console made yet, and rich would see no terminal (nor be told it is one)."""
        if self._console is not None or any(v in os.environ for v in _TERMINAL_VARS):
            return False
        return not self.file.isatty()

    @property
    def is_terminal(self) -> bool:
        return False if self._plain() else self.console.is_terminal

    def print(self, *objects: Any, **options: Any) -> None:
        # only text said to hold no markup: rich would read "[bold]" in the rest
        plain = options.keys() <= {"markup", "highlight", "end"} and options.get("markup") is False
        if plain and all(type(o) is str for o in objects) and self._plain():
            text = " ".join(objects).translate(_STRIPPED).expandtabs(8) + options.get("end", "\n")
            self.file.write(text)
            self.file.flush()
            return
        self.console.print(*objects, **options)

    def status(self, text: str) -> Status:
        return self.console.status(text)

    def flush(self) -> None:
        self.file.flush()


out = LazyConsole()
err = LazyConsole(stderr=True)

if TYPE_CHECKING:
    from tcl.control.config import Config
    from tcl.control.daemon.client import DaemonClient
    from tcl.control.service import Control


@dataclass
class Globals:
    config_path: str | None = None

    def config(self) -> Config:
        from tcl.control.config import load_config  # pydantic models: only when needed

        return load_config(self.config_path)

    def config_location(self) -> tuple[str, bool]:
        """The config file as a request to the daemon names it: absolute (the daemon runs in
        a directory of its own), and whether the user named it (then it must exist)."""
        from tcl.control.paths import config_path

        path, named = config_path(self.config_path)
        return os.path.abspath(path), named


def globals_of(ctx: typer.Context) -> Globals:
    obj = ctx.find_root().obj
    return obj if isinstance(obj, Globals) else Globals()


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print an expected failure (one line, or a short list) and return the Exit to raise."""
    from rich.markup import escape

    err.print(f"[red]error:[/red] {escape(message)}", markup=True, highlight=False)
    return typer.Exit(code)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine; a ``TclError`` becomes a one-line message and a non-zero exit."""
    import asyncio  # only when it runs: a fast CLI start

    try:
        return asyncio.run(coro)
    except TclError as e:
        raise fail(str(e), e.exit_code) from None


def with_control(ctx: typer.Context, body: Callable[[Control], Awaitable[T]]) -> T:
    """Load the config, open a :class:`Control`, run ``body``, always close it."""
    g = globals_of(ctx)

    async def go() -> T:
        from tcl.control.service import Control

        ctl = Control(g.config())
        try:
            return await body(ctl)
        finally:
            await ctl.aclose()

    return run(go())


def served_or_here(ask: Callable[[DaemonClient], T], here: Callable[[], T]) -> T:
    """A read's answer from the ``tcl serve`` daemon when one answers (it holds the store and
    the connections open); else, or when it goes away meanwhile, ``here``'s (the same code, in
    this process). A user's error in the daemon's answer is one line and its exit code."""
    from tcl.control.daemon.client import answering_daemon
    from tcl.control.errors import DaemonError

    client = answering_daemon()
    if client is not None:
        try:
            return ask(client)
        except DaemonError:
            pass  # it went away or broke: done here, as with no daemon
        except TclError as e:
            raise fail(str(e), e.exit_code) from None
    return here()


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    sys.stdout.flush()
