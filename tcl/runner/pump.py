"""The job's stdout and stderr into the event log, in the order the job wrote them.

One thread reads both pipes (``poll``), so an event's place in the log's single ``seq`` is the
order its bytes were read. Two readers (one per pipe) let whichever thread the scheduler woke
first append first: a traceback could come before the line printed, and flushed, before it.
Two pipes carry no timestamps, so bytes written to both within one wake-up of the reader (a
few microseconds when quiet) cannot be told apart: those go stdout first.

The rest is what a terminal shows, as events:

- each stream's text is decoded as UTF-8 and masked for secrets, and goes out a whole line at
  a time; an unfinished line goes out after :data:`PARTIAL_LINE_FLUSH_S` of silence (a
  progress bar, a prompt), or at once when the other stream writes, so it keeps its place;
  the start of a possible metric line waits for its end instead (:meth:`StreamOutput.waits`);
- output that keeps coming is gathered for up to :data:`COALESCE_S` into one event, a few
  large events instead of one per line; the wait ends early when the other stream writes;
  a line after a quiet spell goes out at once.
"""

from __future__ import annotations

import codecs
import os
import select
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tcl.runner.api import LogStream
from tcl.runner.events import EventLog
from tcl.runner.masking import Masker
from tcl.runner.output import StreamOutput

READ_BYTES = 256 * 1024
PIPE_BYTES = 1024 * 1024  # F_SETPIPE_SZ: room for COALESCE_S of fast output
# An unfinished line is sent after this much silence (a progress bar, a prompt).
PARTIAL_LINE_FLUSH_S = 0.05
MAX_PENDING_CHARS = 256 * 1024
# Output that keeps coming is gathered this long into one event.
COALESCE_S = 0.002


@dataclass
class _Pipe:
    """One stream's read state: the bytes not yet a whole character, a secret or a line."""

    fd: int
    out: StreamOutput
    masker: Masker
    decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")("replace")
    )
    pending: str = ""  # the start of a line, not yet sent
    last_data: float = 0.0  # time.monotonic() when the last bytes were taken (silence since)
    read_at: float = 0.0  # time.monotonic() when the round of the last read with bytes began

    def take(self, data: bytes) -> str:
        """The whole lines ``data`` completes (pending keeps the rest, up to a bound)."""
        self.pending += self.masker.feed(self.decoder.decode(data))
        cut = self.pending.rfind("\n")
        if len(self.pending) >= MAX_PENDING_CHARS:
            cut = len(self.pending) - 1
        text, self.pending = self.pending[: cut + 1], self.pending[cut + 1 :]
        return text

    def rest(self) -> str:
        """Everything still held, at end of file."""
        held = self.pending + self.masker.feed(self.decoder.decode(b"", final=True))
        self.pending = ""
        return held + self.masker.flush()

    def may_flush(self) -> bool:
        """Whether the unfinished line may go out before its end (not a metric's start)."""
        return bool(self.pending) and not self.out.waits(self.pending)


class OutputPump:
    """Reads ``pipes`` until each hits end of file (or is closed under it); one thread."""

    def __init__(
        self, log: EventLog, secrets: Sequence[str], pipes: Sequence[tuple[int, LogStream]]
    ) -> None:
        # in the order ties are broken: stdout first
        self._pipes = [
            _Pipe(fd, StreamOutput(log, stream), Masker(secrets)) for fd, stream in pipes
        ]

    def run(self) -> None:
        poller = select.poll()
        open_pipes = {p.fd: p for p in self._pipes}
        for fd in open_pipes:
            poller.register(fd, select.POLLIN)
        while open_pipes:
            try:
                ready = dict(poller.poll(self._timeout_ms(open_pipes.values())))
            except OSError:
                break
            if not ready:
                self._flush_partial(open_pipes.values(), time.monotonic())
                continue
            now = time.monotonic()
            busy = [
                p for p in open_pipes.values() if p.fd in ready and now - p.read_at < COALESCE_S
            ]
            if busy and len(busy) == len(ready):
                # output that keeps coming: gather it, unless another stream speaks meanwhile
                others = [fd for fd in open_pipes if fd not in ready]
                _wait_readable(others, COALESCE_S)
            # what was there first goes first; then what came during the gathering
            pipes = list(open_pipes.values())
            first = [p for p in pipes if p.fd in ready]
            for pipe in first + [p for p in pipes if p.fd not in ready and _readable(p.fd)]:
                if not self._read(pipe, now):
                    poller.unregister(pipe.fd)
                    del open_pipes[pipe.fd]
                    self._send(pipe, pipe.rest())
        for pipe in open_pipes.values():  # the poll failed: keep what was read
            self._send(pipe, pipe.rest())

    def _read(self, pipe: _Pipe, round_at: float) -> bool:
        """Whatever is waiting in the pipe (up to READ_BYTES); False at end of file."""
        data = b""
        eof = False
        try:
            while len(data) < READ_BYTES and (not data or _readable(pipe.fd)):
                more = os.read(pipe.fd, READ_BYTES - len(data))
                if not more:
                    eof = True
                    break
                data += more
        except (OSError, ValueError):
            eof = True
        if data:
            # from before this round's gathering: so a steady stream is gathered every other
            # round at most, and a reader that fell behind catches up without sleeping
            pipe.read_at, pipe.last_data = round_at, time.monotonic()
            self._send(pipe, pipe.take(data))
        return not eof

    def _send(self, pipe: _Pipe, text: str) -> None:
        if not text:
            return
        # another stream's unfinished line was written before this: it goes first
        for other in self._pipes:
            if other is not pipe and other.may_flush():
                other.out.write(other.pending)
                other.pending = ""
        pipe.out.write(text)

    @staticmethod
    def _timeout_ms(pipes: Iterable[_Pipe]) -> int:
        """Until the earliest unfinished line is due (-1: none is)."""
        due = [p.last_data + PARTIAL_LINE_FLUSH_S for p in pipes if p.may_flush()]
        if not due:
            return -1
        return max(0, int((min(due) - time.monotonic()) * 1000) + 1)

    @staticmethod
    def _flush_partial(pipes: Iterable[_Pipe], now: float) -> None:
        for p in pipes:
            if p.may_flush() and now - p.last_data >= PARTIAL_LINE_FLUSH_S:
                p.out.write(p.pending)
                p.pending = ""


def _readable(fd: int) -> bool:
    try:
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False


def _wait_readable(fds: Sequence[int], timeout_s: float) -> None:
    """Sleeps up to ``timeout_s``, less if one of ``fds`` becomes readable."""
    if not fds:
        time.sleep(timeout_s)
        return
    try:
        select.select(fds, [], [], timeout_s)
    except (OSError, ValueError):
        time.sleep(timeout_s)
