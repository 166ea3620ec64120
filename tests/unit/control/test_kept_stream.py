"""`tcl logs` through the daemon (``POST /api/follow`` with ``once``): the kept log is read off
the event loop, a batch at a time, no faster than the client takes it; a client that reads
nothing leaves the daemon holding a queue's worth of lines, not the whole log (issue 29)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

import tcl.control.daemon.streams as daemon_app
from tcl.control.config import parse_config
from tcl.control.daemon.api import Line, LineKind
from tcl.control.lifecycle.follow import READ_BATCH
from tcl.control.logcache import KeptEvent, LogCache, LogTail
from tcl.control.runrequest import RunRequest
from tcl.control.service import Control
from tcl.control.states import RunState
from tcl.control.store import Store
from tcl.runner.api import Event, EventKind, LogStream
from tests.unit.control.conftest import cli_home

RUN = "big-aaaaaa"


async def _drained(queue: asyncio.Queue[Line | None]) -> list[Line]:
    """The stream's lines to its end line, read as a client that reads on would."""
    lines: list[Line] = []
    while True:
        line = await asyncio.wait_for(queue.get(), 30)
        assert line is not None
        lines.append(line)
        if line.kind is LineKind.END:
            return lines


def _log(seq: int) -> Event:
    return Event(seq=seq, ts=0.0, kind=EventKind.LOG, stream=LogStream.STDOUT, data=f"line {seq}\n")


async def test_a_kept_log_is_read_no_faster_than_the_client_takes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cli_home(tmp_path, monkeypatch)
    (tmp_path / "state" / "logs").mkdir(parents=True)
    store = Store(f"sqlite:///{tmp_path / 'tcl.db'}")
    store.create_run(RUN, "big", RunRequest(argv=["true"], chips=0))
    n = 10 * daemon_app.STREAM_QUEUE
    LogCache(RUN).append([_log(i) for i in range(1, n + 1)])
    read = 0
    real_read = LogCache.read

    def counted(
        self: LogCache, after: int = 0, kind: EventKind | None = None
    ) -> Iterator[KeptEvent]:
        nonlocal read
        for e in real_read(self, after, kind):
            read += 1
            yield e

    monkeypatch.setattr(LogCache, "read", counted)
    ctl = Control(parse_config("hosts: {}\n"), store)
    queue: asyncio.Queue[Line | None] = asyncio.Queue(daemon_app.STREAM_QUEUE)
    task = asyncio.create_task(daemon_app.kept_into(ctl, RUN, 0, queue))
    try:
        async with asyncio.timeout(30):
            while not queue.full():  # nobody reads yet
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # time to read on, were the read not held back
        assert not task.done()
        assert read <= daemon_app.STREAM_QUEUE + daemon_app.KEPT_BATCH, read
        lines = await _drained(queue)
        await task
    finally:
        task.cancel()
        await ctl.aclose()
    seqs = [ln.event.seq for ln in lines if ln.kind is LineKind.EVENT and ln.event is not None]
    assert seqs == list(range(1, n + 1)) and read == n
    assert lines[-1].run is not None and lines[-1].run.run_id == RUN


async def test_a_followed_log_is_handed_over_no_faster_than_the_client_takes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tcl logs -f`` (and a followed submit) through the daemon: a client that stops reading
    makes the follow wait with at most a queue and a batch of events read, not the daemon hold
    the whole log (before: an unbounded queue took all of it)."""
    cli_home(tmp_path, monkeypatch)
    (tmp_path / "state" / "logs").mkdir(parents=True)
    store = Store(f"sqlite:///{tmp_path / 'tcl.db'}")
    store.create_run(RUN, "big", RunRequest(argv=["true"], chips=0))
    store.set_state(RUN, RunState.FAILED, message="ended; its log is kept")
    n = 10 * daemon_app.STREAM_QUEUE
    LogCache(RUN).append([_log(i) for i in range(1, n + 1)])
    read = 0
    real_events = LogTail.events

    def counted(self: LogTail) -> Iterator[KeptEvent]:
        nonlocal read
        for e in real_events(self):
            read += 1
            yield e

    monkeypatch.setattr(LogTail, "events", counted)
    ctl = Control(parse_config("hosts: {}\n"), store)
    queue: asyncio.Queue[Line | None] = asyncio.Queue(daemon_app.STREAM_QUEUE)
    task = asyncio.create_task(daemon_app.follow_into(ctl, RUN, 0, queue, None))
    try:
        async with asyncio.timeout(30):
            while not queue.full():  # nobody reads yet
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # time to read on, were the read not held back
        assert not task.done()
        assert read <= daemon_app.STREAM_QUEUE + READ_BATCH, read
        lines = await _drained(queue)
        await task
    finally:
        task.cancel()
        await ctl.aclose()
    seqs = [ln.event.seq for ln in lines if ln.kind is LineKind.EVENT and ln.event is not None]
    assert seqs == list(range(1, n + 1)) and read == n
    assert lines[-1].run is not None and lines[-1].run.state == "failed"
