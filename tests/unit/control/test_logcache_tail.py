"""A kept log read on from where the last read stopped (``LogTail``), and the one shared scan
of it a process's pulls use (``kept_log``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tcl.control.logcache import KeptEvent, LogCache, LogTail, kept_log
from tcl.runner.api import Event, EventKind, LogStream, RunnerState


def _log(seq: int) -> Event:
    return Event(seq=seq, ts=0.0, kind=EventKind.LOG, stream=LogStream.STDOUT, data=f"{seq}\n")


def test_a_tail_reads_on_from_where_it_stopped(tmp_path: Path) -> None:
    cache = LogCache("r", tmp_path)
    cache.append([_log(i) for i in range(1, 4)])
    tail = LogTail(cache.path, after=1)
    assert [e.seq for e in tail.read()] == [2, 3]
    assert tail.read() == [] and tail.pending_bytes() == 0
    cache.append([_log(i) for i in range(4, 9)])
    assert [e.seq for e in tail.read(limit=2)] == [4, 5]  # a batch at a time
    assert [e.seq for e in tail.read()] == [6, 7, 8]


def test_a_tail_leaves_a_line_being_written_for_its_next_read(tmp_path: Path) -> None:
    cache = LogCache("r", tmp_path)
    cache.append([_log(1)])
    whole = cache.path.read_bytes()
    line = KeptEvent(**_log(2).model_dump()).model_dump_json(exclude_none=True).encode()
    with open(cache.path, "ab") as f:
        f.write(line[:20])  # the start of the next line: its writer is amid its append
    tail = LogTail(cache.path)
    assert [e.seq for e in tail.read()] == [1]
    assert tail.pending_bytes() == 20
    with open(cache.path, "ab") as f:
        f.write(line[20:] + b"\n")
    assert [(e.seq, e.data) for e in tail.read()] == [(2, "2\n")]
    assert cache.path.read_bytes().startswith(whole)


def test_a_tail_of_one_kind_skips_the_others_and_a_replaced_log_is_read_anew(
    tmp_path: Path,
) -> None:
    cache = LogCache("r", tmp_path)
    state = Event(seq=2, ts=0.0, kind=EventKind.STATE, state=RunnerState.RUNNING)
    cache.append([_log(1), state, _log(3)])
    tail = LogTail(cache.path, kind=EventKind.LOG)
    assert [e.seq for e in tail.read()] == [1, 3]
    # pruned and kept anew (another file at the path): read from its start, after the cursor
    os.unlink(cache.path)
    fresh = LogCache("r", tmp_path)
    fresh.append([_log(i) for i in range(1, 6)])
    assert [e.seq for e in tail.read()] == [4, 5]


def test_the_shared_scan_follows_a_replaced_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path))
    cache = kept_log("r-2")
    assert kept_log("r-2") is cache  # one per run in a process
    cache.append([_log(i) for i in range(1, 6)])
    assert cache.node_last(0, 0) == 5
    os.unlink(cache.path)
    LogCache("r-2").append([_log(1), _log(2)])
    assert cache.node_last(0, 0) == 2 and cache.last_seq() == 2
    assert [e.seq for e in cache.append([_log(i) for i in range(1, 5)])] == [3, 4]
