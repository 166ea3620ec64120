"""The event log: resume from any seq, paging, concurrent writer and readers, reopening."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import threading
from pathlib import Path

import pytest

from tcl.runner.api import ECHO_PREFIX, EventKind, LogStream, RunnerState, echoed_events
from tcl.runner.events import EVENTS_FILE, INDEX_FILE, EventLog


def fill(log: EventLog, n: int) -> None:
    for i in range(1, n + 1):
        log.append_log(LogStream.STDOUT if i % 3 else LogStream.STDERR, f"line {i}\n" * (i % 5))


def test_resume_from_any_seq_gives_exactly_the_rest(tmp_path: Path) -> None:
    log = EventLog(tmp_path, clock=lambda: 1.5)
    fill(log, 300)
    log.append_state(RunnerState.SUCCEEDED, 0)
    assert log.last_seq == 301
    for after in [0, 1, 2, 17, 150, 299, 300, 301, 400]:
        got: list[int] = []
        cursor = after
        while True:
            events, more = log.read(cursor, limit=7)
            got += [e.seq for e in events]
            cursor = events[-1].seq if events else cursor
            if not more:
                break
        assert got == list(range(after + 1, 302)), after
    events, _ = log.read(299, limit=10)
    assert [e.kind for e in events] == [EventKind.LOG, EventKind.STATE]
    assert events[0].seq == 300 and events[0].ts == 1.5
    assert events[1].state is RunnerState.SUCCEEDED and events[1].exit_code == 0


def test_page_respects_byte_budget_but_always_returns_one(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    for _ in range(10):
        log.append_log(LogStream.STDOUT, "x" * 1000)
    page = log.read_raw(0, limit=100, max_bytes=2500)
    assert 1 <= len(page.lines) <= 3 and page.more
    page = log.read_raw(0, limit=100, max_bytes=1)
    assert len(page.lines) == 1 and page.next == 1


def test_concurrent_writer_and_readers_see_every_event_once_in_order(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    n = 5000
    results: dict[int, list[str]] = {}

    def reader(k: int) -> None:
        seen: list[str] = []
        cursor = 0
        while True:
            events, more = log.read(cursor, limit=random.randint(1, 50))
            for e in events:
                assert e.seq == cursor + 1
                cursor = e.seq
                seen.append(e.data or "")
            if not events and not more:
                if log.finished and cursor == log.last_seq:
                    break
                log.wait_sync(cursor, 1.0)
        results[k] = seen

    readers = [threading.Thread(target=reader, args=(k,)) for k in range(4)]
    for t in readers:
        t.start()
    for i in range(n):
        log.append_log(LogStream.STDOUT, f"{i}\n")
    log.finish()
    for t in readers:
        t.join(30)
    expected = [f"{i}\n" for i in range(n)]
    assert [results[k] == expected for k in range(4)] == [True] * 4


async def test_async_waiter_is_woken_by_a_writer_thread(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    timer = threading.Timer(0.1, log.append_log, (LogStream.STDOUT, "late\n"))
    timer.start()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    assert await log.wait(0, timeout_s=5)
    assert loop.time() - t0 < 2
    assert await log.wait(1, timeout_s=0.05) is False  # nothing new: times out
    log.finish()
    assert await log.wait(1, timeout_s=5)  # finished wakes waiters too


def test_finished_log_refuses_appends(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    log.append_state(RunnerState.TERMINATED)
    log.finish()
    with pytest.raises(RuntimeError):
        log.append_log(LogStream.STDOUT, "x")


def test_reopen_continues_numbering_and_cuts_a_torn_tail(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    fill(log, 10)
    log.close()
    with open(tmp_path / EVENTS_FILE, "ab") as f:
        f.write(b'{"seq":11,"ts":1,"kind":"log"')  # crash mid-write, never indexed
    log = EventLog(tmp_path)
    assert log.last_seq == 10
    log.append_log(LogStream.STDOUT, "after\n")
    events, _ = log.read(9)
    assert [e.seq for e in events] == [10, 11] and events[1].data == "after\n"
    assert (tmp_path / INDEX_FILE).stat().st_size == 11 * 8


def test_echoed_events_read_back_from_a_container_log_past_a_cursor(tmp_path: Path) -> None:
    """``--echo-events``: every event also goes to the echo fd; ``echoed_events`` reads those
    after a cursor out of output mixed with other lines and a torn last one (a pod's log)."""
    r, w = os.pipe()
    log = EventLog(tmp_path / "ev", echo_fd=w)
    log.append_log(LogStream.STDOUT, "one\n")
    log.append_log(LogStream.STDERR, "two TCL_EVENT {}\n")
    log.append_state(RunnerState.SUCCEEDED, exit_code=0)
    log.finish()  # the echo written
    os.close(w)
    echoed = b""
    while chunk := os.read(r, 65536):
        echoed += chunk
    os.close(r)
    text = "runner: starting\n" + echoed.decode() + f'{ECHO_PREFIX}{{"seq": 4, "ts"'
    assert [e.seq for e in echoed_events(text, 0)] == [1, 2, 3]
    rest = echoed_events(text, 1)
    assert [(e.data, e.state) for e in rest] == [("two TCL_EVENT {}\n", None), (None, "succeeded")]
    assert rest == log.read(1)[0]  # the same events the runner serves
    log.close()


def test_an_echo_that_fails_stops_the_echo_never_the_log(tmp_path: Path) -> None:
    r, w = os.pipe()
    os.close(r)  # nobody reads: a write raises BrokenPipeError
    log = EventLog(tmp_path / "ev", echo_fd=w)
    assert log.append_log(LogStream.STDOUT, "a\n") == 1
    assert log.append_log(LogStream.STDOUT, "b\n") == 2
    log.close()
    os.close(w)


def test_a_reader_that_stalls_never_holds_up_the_log(tmp_path: Path) -> None:
    """The echo's reader (a pod's log) stops reading: its pipe fills at 64 KiB, yet appends
    go on (a bounded queue, then dropped lines); what was echoed is in order, once each."""
    r, w = os.pipe()
    log = EventLog(tmp_path / "ev", echo_fd=w)
    block = "x" * 999 + "\n"
    appended = threading.Event()

    def append() -> None:
        for _ in range(20_000):  # 20 MB of log: over the pipe and over the echo's bound
            log.append_log(LogStream.STDOUT, block)
        appended.set()

    threading.Thread(target=append, daemon=True).start()
    assert appended.wait(60), "an append waited on the echo's reader"
    assert log.last_seq == 20_000
    os.set_blocking(r, False)
    echoed = b""
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(r, 1 << 20):
            echoed += chunk
    assert log.read(19_999)[0][0].seq == 20_000
    os.close(r)  # the echo's next write fails: it ends (the log does not)
    log.close()
    os.close(w)
    seqs = [e.seq for e in echoed_events(echoed.decode(), 0)]
    assert seqs and seqs == sorted(set(seqs)), seqs[:5]
