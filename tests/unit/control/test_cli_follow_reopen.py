"""``tcl logs -f`` through the daemon: its follow stream is opened again through a new daemon
when it cannot be opened (the daemon went away between the kept read and the follow: its idle
exit, a newer tcl replacing it), from the last line shown."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import tcl.cli.served as served
from tcl.control.daemon.api import FollowRequest, Line, LineKind, RunEnd
from tcl.control.errors import DaemonError
from tcl.control.logcache import KeptEvent
from tcl.runner.api import EventKind, LogStream


class GoneDaemon:
    def __init__(self) -> None:
        self.asked: list[FollowRequest] = []

    def follow(self, req: FollowRequest) -> Iterator[Line]:
        self.asked.append(req)
        raise DaemonError("tcl serve at daemon.sock: [Errno 111] Connection refused")


class NewDaemon(GoneDaemon):
    def follow(self, req: FollowRequest) -> Iterator[Line]:
        self.asked.append(req)
        event = KeptEvent(seq=6, ts=0.0, kind=EventKind.LOG, stream=LogStream.STDOUT, data="6\n")
        end = RunEnd(run_id="run-1", state="succeeded", exit_code=0)
        return iter([Line(kind=LineKind.EVENT, event=event), Line(kind=LineKind.END, run=end)])


def test_a_follow_that_cannot_be_opened_is_opened_through_a_new_daemon(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gone, new = GoneDaemon(), NewDaemon()
    monkeypatch.setattr(served, "ensure_daemon", lambda: new)
    shown: list[int] = []
    req = FollowRequest(config_path="", config_named=False, run="run-1", after=5)
    client: Any = gone
    code = served.follow_served(client, req, lambda e: shown.append(e.seq))
    assert code == 0 and shown == [6]
    assert [(r.run, r.after) for r in gone.asked + new.asked] == [("run-1", 5), ("run-1", 5)]
