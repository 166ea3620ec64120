"""A follow's cursor is the last event it read, never more: an event its owner keeps at any
moment is shown once (``tcl logs -f`` once lost 10 lines of a run its daemon kept as it caught
up; the e2e test ``test_submit_follow_through_a_cut_ssh_connection`` under CPU load).

Each test puts the owner's append at the exact moment that lost it: between ``tcl logs -f``'s
printing of what is kept and the start of its follow; between a reader meeting the end of a
line being written and its next read."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import tcl.control.logcache as logcache
from tcl.cli.app import app
from tcl.control.logcache import KeptEvent, LogCache
from tcl.control.runrequest import RunRequest
from tcl.control.states import RunState
from tcl.control.store import Store
from tcl.runner.api import Event, EventKind, LogStream, RunnerState
from tests.unit.control.conftest import cli_home

RUN = "train-aaaaaa"


def _log(seq: int) -> Event:
    return Event(seq=seq, ts=0.0, kind=EventKind.LOG, stream=LogStream.STDOUT, data=f"line {seq}\n")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cli_home(tmp_path, monkeypatch)  # the follow in this process
    (tmp_path / "state" / "logs").mkdir(parents=True)
    return tmp_path


def test_logs_f_shows_what_the_owner_keeps_between_its_catch_up_and_its_follow(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(f"sqlite:///{home / 'state' / 'tcl.db'}")
    store.create_run(RUN, "train", RunRequest(argv=["python", "t.py"]))
    store.set_state(RUN, RunState.PROVISIONING)
    store.set_placement(RUN, "gpu1", "ssh", "0" * 64)
    store.set_state(RUN, RunState.RUNNING)
    store.set_state(RUN, RunState.SUCCEEDED, exit_code=0)  # ended: the follow ends once caught up
    store.close()
    owner = LogCache(RUN, home / "state" / "logs")  # the run's owner (the daemon's controller)
    owner.append([_log(i) for i in range(1, 4)])
    read = LogCache.read
    kept_once: list[bool] = []

    def read_then_owner_keeps(
        self: LogCache, after: int = 0, kind: EventKind | None = None
    ) -> Iterator[KeptEvent]:
        yield from read(self, after, kind)
        if not kept_once:  # the moment `tcl logs` printed what was kept, before it follows
            kept_once.append(True)
            final = Event(seq=5, ts=0.0, kind=EventKind.STATE, state=RunnerState.SUCCEEDED)
            owner.append([_log(4), final])

    monkeypatch.setattr(LogCache, "read", read_then_owner_keeps)
    res = CliRunner().invoke(app, ["logs", "-f", RUN])
    assert kept_once
    assert res.exit_code == 0, res.output
    assert res.stdout == "".join(f"line {i}\n" for i in range(1, 5))  # line 4 shown, once


class _ReaderView(io.FileIO):
    """The cache file as a reader's ``open`` gives it; ``then`` runs the first time a read
    meets the file's end (the owner's append finishing at that very moment)."""

    def __init__(self, path: Path, then: Callable[[], None]) -> None:
        super().__init__(path, "r")
        self._then: Callable[[], None] | None = then

    def readinto(self, buffer: Any) -> int | None:
        n = super().readinto(buffer)
        if n == 0 and self._then is not None:
            then, self._then = self._then, None
            then()
        return n


def test_a_read_meeting_a_line_being_written_leaves_it_to_the_next_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = LogCache("whole", tmp_path).append([_log(i) for i in range(1, 5)])
    data = b"".join(e.model_dump_json(exclude_none=True).encode() + b"\n" for e in lines)
    third = data.index(b'{"seq":3')
    cut = third + 20  # the owner's append of 3 and 4 is half done: line 3 is not whole yet
    cache = LogCache("r", tmp_path)
    cache.path.write_bytes(data[:cut])

    def rest() -> None:
        if cache.path.stat().st_size == cut:  # once: the appends that follow find it whole
            with open(cache.path, "ab") as f:
                f.write(data[cut:])

    real_open = open

    def reader_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if Path(file) != cache.path or "r" not in mode:
            return real_open(file, mode, *args, **kwargs)
        raw = io.BufferedReader(_ReaderView(cache.path, rest))
        return raw if "b" in mode else io.TextIOWrapper(raw, encoding="utf-8")

    monkeypatch.setattr(logcache, "open", reader_open, raising=False)
    shown: list[int] = []
    last = 0
    for _ in range(2):  # a follow: read what is kept past the cursor, twice
        for e in cache.read(last):
            shown.append(e.seq)
            last = e.seq
    assert shown == [1, 2, 3, 4]


def test_an_append_after_a_line_torn_by_a_crash_starts_a_line_of_its_own(tmp_path: Path) -> None:
    cache = LogCache("r", tmp_path)
    cache.append([_log(1), _log(2)])
    with open(cache.path, "ab") as f:
        f.write(b'{"seq":3,"ts":0.0,"kind":"log","da')  # the writer died mid-write
    again = LogCache("r", tmp_path)  # the next one (a restarted daemon)
    assert [e.seq for e in again.append([_log(3), _log(4)])] == [3, 4]
    assert [(e.seq, e.data) for e in LogCache("r", tmp_path).read()] == [
        (1, "line 1\n"),
        (2, "line 2\n"),
        (3, "line 3\n"),
        (4, "line 4\n"),
    ]
