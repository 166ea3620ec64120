"""The event echo (``tcl-runner serve --echo-events``): each event line, also written to an fd
(the container's stdout: a pod's log, the fallback for events the runner could not serve).

A thread of its own writes: an append to the event log never waits on whoever reads that fd
(a pipe nobody drains fills at 64 KiB, and a blocking write there would stall every append
behind the log's lock). What waits is bounded (``max_bytes``); past it lines are dropped and
counted, never the log's own. A write that fails (the reader is gone) ends the echo.
"""

from __future__ import annotations

import collections
import os
import threading

MAX_QUEUED_BYTES = 8 * 1024 * 1024
DRAIN_S = 10.0  # how long the end of a run waits for the echo to be written


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Echo:
    """Lines offered here are written to ``fd`` in order, by a thread of its own."""

    def __init__(self, fd: int, max_bytes: int = MAX_QUEUED_BYTES) -> None:
        self._fd = fd
        self._max = max_bytes
        self._lines: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._cond = threading.Condition()
        self._closing = False
        self._broken = False
        self.dropped = 0  # lines not echoed: the queue was full
        self._thread = threading.Thread(target=self._write, name="event-echo", daemon=True)
        self._thread.start()

    def offer(self, line: bytes) -> None:
        """Queue ``line``; never blocks (a full queue drops it)."""
        with self._cond:
            if self._broken or self._closing:
                return
            if self._queued + len(line) > self._max:
                self.dropped += 1
                return
            self._lines.append(line)
            self._queued += len(line)
            self._cond.notify()

    def close(self, timeout_s: float = DRAIN_S) -> None:
        """No more lines: wait up to ``timeout_s`` for the queued ones to be written."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout_s)

    def _write(self) -> None:
        while True:
            with self._cond:
                while not self._lines and not self._closing:
                    self._cond.wait()
                if not self._lines:
                    return  # closed, and everything written
                batch = b"".join(self._lines)
                self._lines.clear()
            try:
                _write_all(self._fd, batch)  # outside the lock: offers go on meanwhile
            except OSError:  # the reader is gone: the echo ends, the log goes on
                with self._cond:
                    self._broken = True
                    self._lines.clear()
                    self._queued = 0
                return
            with self._cond:
                self._queued -= len(batch)
