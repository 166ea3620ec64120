"""Supervision of the daemon's long-running loops (the sweep scheduler today, the run
controller's reconcile loop next).

A loop is an ``async def run(stopping)`` that returns only once ``stopping`` is set. Before this
module an error that escaped one (a state store restarted under it) ended its task and nobody
looked: the daemon went on answering ``tcl serve --status`` with a scheduler that claimed nothing
again. Now each loop runs under :class:`Supervisor`:

- an exception is logged with its traceback, counted, and the loop is started again after a
  full-jitter backoff (``base_s`` doubling up to ``cap_s``; a loop that ran longer than
  ``cap_s`` before it died starts over from ``base_s``);
- a loop that returns while the daemon is not stopping is restarted the same way;
- an error a loop survives by itself (it retries the store on its next pass) is reported with
  :meth:`Supervisor.note_error`, so that ``tcl serve --status`` shows it too;
- :meth:`Supervisor.health` is the loops' part of ``GET /api/status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tcl.control.backoff import backoff_s
from tcl.control.daemon.api import LoopHealth

log = logging.getLogger("tcl.serve")

Loop = Callable[[asyncio.Event], Awaitable[None]]
MAX_ERROR_TEXT = 500


@dataclass
class _Record:
    name: str
    running: bool = False
    restarts: int = 0
    errors: int = 0
    last_error: str = ""
    last_error_at: float | None = None

    def error(self, e: BaseException) -> None:
        self.errors += 1
        self.last_error = f"{type(e).__name__}: {e}"[:MAX_ERROR_TEXT]
        self.last_error_at = time.time()


class LoopReturned(Exception):
    """A loop returned although the daemon is not stopping."""


class Supervisor:
    def __init__(self, stopping: asyncio.Event, base_s: float = 0.5, cap_s: float = 30.0) -> None:
        self.stopping = stopping
        self.base_s = base_s
        self.cap_s = cap_s
        self._records: dict[str, _Record] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str, loop: Loop) -> None:
        if name in self._tasks:
            raise ValueError(f"a loop named {name!r} runs already")
        self._records[name] = _Record(name)
        self._tasks[name] = asyncio.create_task(self._supervise(name, loop), name=name)

    def note_error(self, name: str, e: BaseException) -> None:
        """An error the loop ``name`` survived (and will retry by itself)."""
        record = self._records.get(name)
        if record is not None:
            record.error(e)

    def health(self) -> list[LoopHealth]:
        return [
            LoopHealth(
                name=r.name,
                running=r.running,
                restarts=r.restarts,
                errors=r.errors,
                last_error=r.last_error,
                last_error_at=r.last_error_at,
            )
            for r in self._records.values()
        ]

    async def wait(self, timeout_s: float = 60.0) -> None:
        """Once ``stopping`` is set: wait for the loops to end (they hand their work back)."""
        if self._tasks:
            await asyncio.wait(self._tasks.values(), timeout=timeout_s)

    async def _supervise(self, name: str, loop: Loop) -> None:
        record = self._records[name]
        attempt = 0
        first = True
        while not self.stopping.is_set():
            if not first:
                record.restarts += 1
            first = False
            started = time.monotonic()
            record.running = True
            try:
                await loop(self.stopping)
                if self.stopping.is_set():
                    break
                raise LoopReturned(f"the {name} loop returned while the daemon runs")
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.exception("%s loop died; starting it again", name)
                record.error(e)
            finally:
                record.running = False
            if time.monotonic() - started > self.cap_s:
                attempt = 0  # it worked for a while: not a crash loop
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self.stopping.wait(), backoff_s(attempt, self.base_s, self.cap_s)
                )
            attempt += 1
