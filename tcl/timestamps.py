"""How tcl writes a moment: ISO 8601 in UTC, to the millisecond (``ps --json``, ``logs -t``).
A module of its own: the CLI's log printing needs it before anything heavier is imported."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
