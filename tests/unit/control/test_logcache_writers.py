"""Two writers of one run's log cache (a ``tcl logs`` catching up while the daemon's
controller takes the run, in the moment no lease holds it): neither repeats an event nor
numbers two alike, in one process or two."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from tcl.control.logcache import LogCache
from tcl.runner.api import Event, EventKind, LogStream


def _events(first: int, last: int) -> list[Event]:
    return [
        Event(seq=i, ts=0.0, kind=EventKind.LOG, stream=LogStream.STDOUT, data=f"line {i}\n")
        for i in range(first, last + 1)
    ]


def _kept(path: Path) -> list[tuple[int, int]]:
    return [(e.seq, e.node_seq) for e in LogCache("r", path).read()]


def test_writers_that_interleave_keep_each_event_once_in_order(tmp_path: Path) -> None:
    a, b = LogCache("r", tmp_path), LogCache("r", tmp_path)
    assert [e.node_seq for e in a.append(_events(1, 5))] == [1, 2, 3, 4, 5]
    assert [e.node_seq for e in b.append(_events(1, 8))] == [6, 7, 8]
    # `a` knew of 5 events: it takes in `b`'s 6..8 before it appends
    assert [(e.seq, e.node_seq) for e in a.append(_events(4, 10))] == [(9, 9), (10, 10)]
    assert _kept(tmp_path) == [(i, i) for i in range(1, 11)]
    assert a.last_seq() == b.last_seq() == 10


def _writer(path: str, pages: list[tuple[int, int]]) -> None:
    cache = LogCache("r", Path(path))
    for first, last in pages:
        cache.append(_events(first, last))


def test_two_processes_appending_pages_of_one_runner_keep_every_line_once(tmp_path: Path) -> None:
    # each pulls the same runner, in pages that overlap the other's
    pages_a = [(i, i + 9) for i in range(1, 2000, 7)]
    pages_b = [(i, i + 4) for i in range(1, 2000, 3)]
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), p)) for p in (pages_a, pages_b)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    kept = _kept(tmp_path)
    assert [seq for seq, _ in kept] == list(range(1, len(kept) + 1))  # run-wide, no gap
    assert [node_seq for _, node_seq in kept] == list(range(1, len(kept) + 1))  # each once
    assert len(kept) >= 2000
