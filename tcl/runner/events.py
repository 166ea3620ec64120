"""The event log: every log chunk, metric and state change, append-only on disk, read by cursor.

Two files in the log's directory:

- ``events.jsonl``: one JSON ``Event`` per line, in ``seq`` order (seq starts at 1).
- ``events.idx``: for each event, the byte offset of its line, as a little-endian u64; the
  entry of ``seq`` sits at ``(seq - 1) * 8``.

A reader asks for the events after a ``seq`` and gets them with two ``pread`` calls, however long
the log is; nothing per event is kept in memory. One writer at a time (a lock); any number of
readers, in threads (``wait_sync``) or on event loops (``wait``), are woken on each append.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tcl.runner.api import ECHO_PREFIX, Event, EventKind, LogStream, RunnerState
from tcl.runner.echo import Echo
from tcl.runner.metricline import Phase

EVENTS_FILE = "events.jsonl"
INDEX_FILE = "events.idx"
_ENTRY = struct.Struct("<Q")
MAX_PAGE_EVENTS = 10_000
MAX_PAGE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class RawPage:
    """Serialized events (one JSON object each) and the cursor to continue from."""

    lines: list[bytes]
    next: int  # seq of the last event in ``lines`` (or ``after`` when empty)
    more: bool  # events past ``next`` already exist


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class EventLog:
    """Append-only event file plus offset index; thread-safe; async and sync waiters."""

    def __init__(
        self,
        directory: Path,
        clock: Callable[[], float] = time.time,
        echo_fd: int | None = None,
    ) -> None:
        """``echo_fd``: each event is also written there (``ECHO_PREFIX`` and its line) while
        it can be, by a thread of its own (:mod:`tcl.runner.echo`: an append never waits on
        its reader); a write that fails stops the echo, never the log."""
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._clock = clock
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        self._data_fd = os.open(directory / EVENTS_FILE, flags, 0o600)
        self._idx_fd = os.open(directory / INDEX_FILE, flags, 0o600)
        # Reopening an existing log (batch re-run in the same dir) continues its numbering;
        # a torn tail (crash between the two writes) is cut back to the last indexed event.
        idx_size = os.fstat(self._idx_fd).st_size
        self._last = idx_size // _ENTRY.size
        os.ftruncate(self._idx_fd, self._last * _ENTRY.size)
        self._size = os.fstat(self._data_fd).st_size
        if self._last:
            last_start = self._offset(self._last)
            tail = os.pread(self._data_fd, self._size - last_start, last_start)
            end = tail.find(b"\n")
            self._size = last_start + end + 1 if end >= 0 else last_start
            if end < 0:
                self._last -= 1
                os.ftruncate(self._idx_fd, self._last * _ENTRY.size)
            os.ftruncate(self._data_fd, self._size)
        self._echo = Echo(echo_fd) if echo_fd is not None else None
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._finished = False
        self._phases: set[Phase] = set()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    # -- writing -------------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        return self._last

    @property
    def finished(self) -> bool:
        """True once ``finish`` was called: no event will follow the last one."""
        return self._finished

    def append_log(self, stream: LogStream, data: str) -> int:
        return self._append({"kind": EventKind.LOG.value, "stream": stream.value, "data": data})

    def append_metric(self, stream: LogStream, data: str) -> int:
        """A metric the job printed (``tcl.runner.metricline``); ``data`` its canonical JSON."""
        return self._append({"kind": EventKind.METRIC.value, "stream": stream.value, "data": data})

    def append_phase(self, phase: Phase) -> int | None:
        """The attempt reached ``phase`` (``data`` its name); once each (None: seen already)."""
        with self._lock:
            if phase in self._phases:
                return None
            self._phases.add(phase)
        return self._append({"kind": EventKind.PHASE.value, "data": phase.value})

    def append_state(
        self,
        state: RunnerState,
        exit_code: int | None = None,
        pid: int | None = None,
        reason: str | None = None,
    ) -> int:
        fields: dict[str, object] = {
            "kind": EventKind.STATE.value,
            "state": state.value,
            "exit_code": exit_code,
        }
        if pid is not None:
            fields["pid"] = pid
        if reason is not None:
            fields["reason"] = reason
        return self._append(fields)

    def _append(self, fields: dict[str, object]) -> int:
        with self._lock:
            if self._finished:
                raise RuntimeError("event log is finished")
            seq = self._last + 1
            record = {
                "seq": seq,
                "ts": round(self._clock(), 6),
                "kind": fields["kind"],
                "stream": fields.get("stream"),
                "data": fields.get("data"),
                "state": fields.get("state"),
                "exit_code": fields.get("exit_code"),
            }
            for extra in ("pid", "reason"):  # only some states have one: lines stay short
                if extra in fields:
                    record[extra] = fields[extra]
            line = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
            _write_all(self._data_fd, line)
            _write_all(self._idx_fd, _ENTRY.pack(self._size))
            self._size += len(line)
            self._last = seq
            if self._echo is not None:
                self._echo.offer(ECHO_PREFIX.encode() + line)
            self._wake_locked()
        return seq

    def finish(self) -> None:
        """No more events: flush to disk, wake every waiter so followers can end, and write
        what the echo holds (waiting a bounded time)."""
        with self._lock:
            if self._finished:
                return
            self._finished = True
            os.fsync(self._data_fd)
            os.fsync(self._idx_fd)
            self._wake_locked()
        if self._echo is not None:
            self._echo.close()

    def _wake_locked(self) -> None:
        self._cond.notify_all()
        waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(_resolve, fut)

    def close(self) -> None:
        if self._echo is not None:
            self._echo.close()
        with self._lock:
            for fd in (self._data_fd, self._idx_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)

    # -- reading -------------------------------------------------------------------------

    def _offset(self, seq: int) -> int:
        (offset,) = _ENTRY.unpack(os.pread(self._idx_fd, _ENTRY.size, (seq - 1) * _ENTRY.size))
        return int(offset)

    def read_raw(
        self, after: int, limit: int = MAX_PAGE_EVENTS, max_bytes: int = MAX_PAGE_BYTES
    ) -> RawPage:
        """The events with ``seq > after``: at most ``limit`` of them and about ``max_bytes``
        (always at least one when any exists)."""
        with self._lock:
            last, size = self._last, self._size
        after = max(0, after)
        limit = max(1, min(limit, MAX_PAGE_EVENTS))
        if after >= last:
            return RawPage([], after, False)
        count = min(limit, last - after)
        raw_idx = os.pread(self._idx_fd, count * _ENTRY.size, after * _ENTRY.size)
        starts = [int(o) for (o,) in _ENTRY.iter_unpack(raw_idx)]
        end_of = [*starts[1:], self._offset(after + count + 1) if after + count < last else size]
        take = 1
        while take < count and end_of[take] - starts[0] <= max_bytes:
            take += 1
        blob = os.pread(self._data_fd, end_of[take - 1] - starts[0], starts[0])
        lines = blob.split(b"\n")[:take]
        return RawPage(lines, after + take, after + take < last)

    def read(self, after: int, limit: int = MAX_PAGE_EVENTS) -> tuple[list[Event], bool]:
        page = self.read_raw(after, limit)
        return [Event.model_validate_json(line) for line in page.lines], page.more

    def wait_sync(self, after: int, timeout_s: float | None) -> bool:
        """Block until an event past ``after`` exists or the log is finished; True if so."""
        with self._cond:
            return self._cond.wait_for(lambda: self._last > after or self._finished, timeout_s)

    async def wait(self, after: int, timeout_s: float | None) -> bool:
        """Like ``wait_sync`` on an event loop, without blocking it."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._last > after or self._finished:
                return True
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, fut))
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            with self._lock, contextlib.suppress(ValueError):
                self._waiters.remove((loop, fut))
            return self._last > after or self._finished
        return True


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
