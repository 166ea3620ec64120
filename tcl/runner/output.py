"""One output stream of the job into the event log, its metric lines apart from its log.

The executor's pump hands over the stream's text, masked and in order. On stdout, a whole line
that :func:`tcl.runner.metricline.parse_line` accepts becomes a ``metric`` event (or a ``phase``
one; the first metric with a step marks the ``first_step`` phase too); everything
else (stderr always) becomes ``log`` events, in the order it was printed. A line is whole when
it begins where the previous text ended with a newline: the rest of a line whose start went out
early (after a pause, :data:`tcl.runner.pump.PARTIAL_LINE_FLUSH_S`) is never a metric, so
an unfinished line that may still become one waits for its end (:meth:`StreamOutput.waits`).
"""

from __future__ import annotations

import contextlib

from tcl.runner.api import LogStream
from tcl.runner.events import EventLog
from tcl.runner.metricline import MAX_LINE_BYTES, PREFIX, Phase, parse_line


class StreamOutput:
    """The event log as one stream of the job writes to it (one per stream: the line state)."""

    def __init__(self, log: EventLog, stream: LogStream) -> None:
        self._log = log
        self._stream = stream
        self._metrics = stream is LogStream.STDOUT  # a metric goes to stdout, never stderr
        self._line_start = True  # the next text starts a line

    def write(self, text: str) -> None:
        if not text:
            return
        with contextlib.suppress(RuntimeError):  # the log finished: a leftover process
            if self._metrics and PREFIX in text:
                self._write_lines(text)
            else:  # the common case: no line to look at, one event
                self._log.append_log(self._stream, text)
        self._line_start = text.endswith("\n")

    def waits(self, pending: str) -> bool:
        """Whether ``pending`` (the start of a line, not yet ended) should wait for the rest
        of its line rather than go out after a pause: it may still become a metric."""
        if not self._metrics or not self._line_start or len(pending) > MAX_LINE_BYTES:
            return False
        return PREFIX.startswith(pending[: len(PREFIX)])

    def _write_lines(self, text: str) -> None:
        plain: list[str] = []  # log text gathered between two metrics: one event
        line_start = self._line_start
        start = 0
        while start < len(text):
            end = text.find("\n", start)
            end = len(text) if end < 0 else end + 1
            line = text[start:end]
            start = end
            record = parse_line(line) if line_start else None
            line_start = line.endswith("\n")
            if record is None:
                plain.append(line)
                continue
            if plain:
                self._log.append_log(self._stream, "".join(plain))
                plain = []
            if isinstance(record, Phase):
                self._log.append_phase(record)
                continue
            if record.step is not None:
                self._log.append_phase(Phase.FIRST_STEP)
            self._log.append_metric(self._stream, record.to_json())
        if plain:
            self._log.append_log(self._stream, "".join(plain))
