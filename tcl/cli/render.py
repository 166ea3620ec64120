"""How runs and events look on a terminal (and in --json)."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any

from tcl.cli._common import err
from tcl.cli.termsafe import terminal_text
from tcl.runner.api import Event, EventKind, LogStream
from tcl.timestamps import iso

if TYPE_CHECKING:
    from rich.progress import Progress
    from rich.status import Status


def print_event(e: Event, timestamps: bool = False, raw: bool = False) -> None:
    """A log event goes to stdout (stderr lines to stderr); state events are not printed.
    The job's control sequences other than colours are dropped unless ``raw``
    (:mod:`tcl.cli.termsafe`)."""
    if e.kind is not EventKind.LOG or e.data is None:
        return
    stream = sys.stderr if e.stream is LogStream.STDERR else sys.stdout
    text = e.data if raw else terminal_text(e.data)
    if getattr(e, "nodes", 1) > 1:  # a multi-node run's kept event: say whose line it is
        prefix = f"[{getattr(e, 'noun', 'node')} {getattr(e, 'node', 0)}] "
        text = "".join(prefix + line for line in text.splitlines(keepends=True))
    if timestamps:
        stamp = iso(e.ts) + " "
        lines = text.splitlines(keepends=True)
        text = "".join(stamp + line for line in lines)
    stream.write(text)
    stream.flush()


class RichObserver:
    """Spinner for waits, a bar for uploads; both on stderr, silent when not a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and err.is_terminal
        # TCL_TRACE=1: print each step with its time since start (where does submit time go?)
        self.trace = os.environ.get("TCL_TRACE") == "1"
        self._t0 = time.perf_counter()
        self._status: Status | None = None
        self._progress: Progress | None = None
        self._task: Any = None

    def status(self, text: str) -> None:
        if self.trace:
            err.print(f"[{time.perf_counter() - self._t0:6.2f}s] {text}", markup=False)
        if not self.enabled:
            return
        self._end_progress()
        if self._status is None:
            self._status = err.status(text)
            self._status.start()
        else:
            self._status.update(text)

    def progress(self, done: int, total: int) -> None:
        if not self.enabled or total < 1 << 20:
            return
        if self._progress is None:
            from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

            if self._status is not None:
                self._status.stop()
                self._status = None
            self._progress = Progress(
                "uploading code",
                BarColumn(),
                DownloadColumn(),
                TransferSpeedColumn(),
                console=err.console,
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task("upload", total=total)
        self._progress.update(self._task, completed=done)

    def note(self, text: str) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None
        err.print(text, markup=False)

    def _end_progress(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def close(self) -> None:
        self._end_progress()
        if self._status is not None:
            self._status.stop()
            self._status = None
