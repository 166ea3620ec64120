"""Local copies of run events (``<state-dir>/logs/<run>.jsonl``), the cursor for following.

Every event pulled from a runner is appended here before it is shown, and the last ``seq`` in
the file is where the next pull starts. So ``tcl logs`` works after the host is gone, and a
follow that loses its connection resumes with no lost and no repeated line.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from tcl.control.paths import logs_dir
from tcl.runner.api import Event


class LogCache:
    def __init__(self, run_id: str, directory: Path | None = None) -> None:
        self.path = (directory or logs_dir()) / f"{run_id}.jsonl"
        self._last: int | None = None

    def last_seq(self) -> int:
        """The highest ``seq`` stored (0 when nothing is)."""
        if self._last is None:
            self._last = 0
            line = _last_line(self.path)
            if line:
                try:
                    self._last = Event.model_validate_json(line).seq
                except ValueError:  # a torn last line (crash mid-write): rescan
                    self._last = max((e.seq for e in self.read()), default=0)
        return self._last

    def append(self, events: list[Event]) -> list[Event]:
        """Store the events newer than what is kept; return exactly those, in order."""
        last = self.last_seq()
        fresh = []
        for e in sorted(events, key=lambda e: e.seq):
            if e.seq > last:
                fresh.append(e)
                last = e.seq
        if fresh:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write("".join(e.model_dump_json(exclude_none=True) + "\n" for e in fresh))
                f.flush()
                os.fsync(f.fileno())
            self._last = last
        return fresh

    def read(self, after: int = 0) -> Iterator[Event]:
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                try:
                    e = Event.model_validate_json(line)
                except ValueError:
                    continue
                if e.seq > after:
                    yield e


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            pos = max(0, end - 65536)
            f.seek(pos)
            lines = f.read().splitlines()
    except FileNotFoundError:
        return ""
    return lines[-1].decode("utf-8", "replace") if lines else ""
