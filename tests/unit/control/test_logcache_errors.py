"""A failure's message names the job's last stderr line (issue 31): ``LogCache.last_error_line``."""

from __future__ import annotations

from pathlib import Path

from tcl.control.logcache import ERROR_LINE_CHARS, LogCache
from tcl.runner.api import Event, EventKind, LogStream


def _log(seq: int, stream: LogStream, data: str) -> Event:
    return Event(seq=seq, ts=0.0, kind=EventKind.LOG, stream=stream, data=data)


def test_the_attempt_s_last_stderr_line_bounded(tmp_path: Path) -> None:
    cache = LogCache("r", tmp_path)
    assert cache.last_error_line(0) == ""
    cache.append([_log(1, LogStream.STDERR, "first attempt's error\n")], attempt=0)
    cache.append(
        [
            _log(1, LogStream.STDERR, "Traceback (most recent call last):\n  File x\n"),
            _log(2, LogStream.STDERR, "RuntimeError: CUDA out of memory\n\n"),
            _log(3, LogStream.STDOUT, "step 10 loss 2.3\n"),  # stdout after it: not an error
        ],
        attempt=1,
    )
    assert cache.last_error_line(1) == "RuntimeError: CUDA out of memory"
    assert cache.last_error_line(0) == "first attempt's error"
    cache.append([_log(4, LogStream.STDERR, "x" * 1000)], attempt=1)
    assert cache.last_error_line(1) == "x" * ERROR_LINE_CHARS + "…"
