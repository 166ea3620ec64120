"""``tcl submit`` and ``tcl logs`` through the ``tcl serve`` daemon: send the request, draw its
stream.

The daemon keeps SSH connections, forwards and the store open between commands, so this side
only reads flags, sends them and prints what comes back. Ctrl-C before the run starts asks the
daemon to cancel (it cleans up as an in-process submit would, and the stream says so); Ctrl-C
while following detaches. A stream that breaks while following (the daemon was stopped or
replaced) resumes from the last event printed, through a new daemon.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType

from tcl.cli._common import err
from tcl.cli.follow import detached, reconnecting, report_end
from tcl.cli.render import RichObserver, print_event
from tcl.control.daemon.api import (
    FollowRequest,
    Line,
    LineKind,
    SubmitRequest,
)
from tcl.control.daemon.client import DaemonClient, LineStream, ensure_daemon
from tcl.control.errors import DaemonError, SubmitCancelled, TclError
from tcl.control.logcache import KeptEvent
from tcl.control.states import RunState
from tcl.control.submitted import SubmitResult

Announce = Callable[[SubmitResult], None]
Show = Callable[[KeptEvent], None]
MAX_STREAM_BREAKS = 5


class _Follow:
    """Where a submit stands: its id (to cancel it), its run, the last event printed."""

    def __init__(self) -> None:
        self.submission: str | None = None
        self.cancels = 0
        self.run_id: str | None = None
        self.last_seq = 0


def submit_served(
    client: DaemonClient, req: SubmitRequest, obs: RichObserver, announce: Announce
) -> int:
    """Run the submit in the daemon and draw it; return the exit code. A ``TclError`` from the
    daemon is raised here (the caller prints it as one line)."""
    pos = _Follow()

    def on_sigint(_sig: int, _frame: FrameType | None) -> None:
        # Before the run starts, Ctrl-C asks the daemon to cancel and the stream goes on (it
        # ends with how the cancel went): nothing is raised into the read, which would leave
        # the response unreadable. A second Ctrl-C, or one while following, leaves at once.
        if pos.run_id is not None or pos.submission is None or pos.cancels:
            raise KeyboardInterrupt
        pos.cancels += 1
        obs.close()
        client.cancel(pos.submission)

    previous = signal.signal(signal.SIGINT, on_sigint)
    lines: LineStream | None = None
    try:
        lines = client.submit(req)  # a Ctrl-C from here on is a cancel, however early
        for line in lines:
            if line.kind is LineKind.ACCEPTED:
                pos.submission = line.submission
            elif line.kind is LineKind.SUBMITTED:
                obs.close()
                assert line.result is not None
                pos.run_id = line.result.run_id
                announce(line.result)
                if pos.cancels:  # too late: it had started, and keeps running
                    return detached(pos.run_id)
                if not req.follow:
                    return 0
                again = FollowRequest(
                    config_path=req.config_path, config_named=req.config_named, run=pos.run_id
                )
                return _draw_follow(client, lines, again, pos, print_event)
            else:
                _draw_progress(line, obs)
    except KeyboardInterrupt:
        if pos.run_id is not None:
            return detached(pos.run_id)
        # closing the stream cancels the submit in the daemon too
        raise SubmitCancelled(
            "cancelled" if pos.submission else "cancelled; nothing was placed"
        ) from None
    finally:
        signal.signal(signal.SIGINT, previous)
        obs.close()
        if lines is not None:
            lines.close()
    raise DaemonError("tcl serve ended the submit without a result (see its log)")


def _draw_progress(line: Line, obs: RichObserver) -> None:
    if line.kind is LineKind.STATUS:
        obs.status(line.text)
    elif line.kind is LineKind.PROGRESS:
        obs.progress(line.done, line.total)
    elif line.kind is LineKind.NOTE:
        obs.note(line.text)
    elif line.kind is LineKind.ERROR:
        raise _error(line)


def _error(line: Line) -> TclError:
    e = SubmitCancelled(line.text) if line.cancelled else TclError(line.text)
    e.exit_code = line.exit_code
    return e


def kept_served(client: DaemonClient, req: FollowRequest) -> tuple[str, list[KeptEvent]]:
    """The run ``req`` names (the newest when it names none) and its kept log events, once its
    host was asked for what is not kept yet (``req.once``). The daemon's notes go to stderr."""
    run_id: str | None = None
    events: list[KeptEvent] = []
    for line in client.follow(req):
        if line.kind is LineKind.EVENT and line.event is not None:
            events.append(line.event)
        elif line.kind is LineKind.NOTE:
            err.print(line.text, markup=False)
        elif line.kind is LineKind.END and line.run is not None:
            run_id = line.run.run_id
        elif line.kind is LineKind.ERROR:
            raise _error(line)
    if run_id is None:
        raise DaemonError("tcl serve ended the log read early (see its log)")
    return run_id, events


def follow_served(client: DaemonClient, req: FollowRequest, show: Show) -> int:
    """Follow ``req.run`` after ``req.after`` to its end through the daemon (a broken stream
    resumes through a new one); return the exit code, as a followed submit does."""
    pos = _Follow()
    pos.run_id, pos.last_seq = req.run, req.after
    return _draw_follow(client, None, req, pos, show)


def _draw_follow(
    client: DaemonClient, lines: LineStream | None, req: FollowRequest, pos: _Follow, show: Show
) -> int:
    """Show the stream's lines (``lines``; None: open one at ``pos``) to the run's end; a stream
    that breaks, or cannot be opened (the daemon gone between a ``tcl logs -f``'s kept read and
    its follow), is opened again through a new daemon, from the last line shown."""
    assert pos.run_id is not None
    breaks = 0
    while True:
        try:
            if lines is None:
                lines = client.follow(
                    FollowRequest(
                        config_path=req.config_path,
                        config_named=req.config_named,
                        run=pos.run_id,
                        after=pos.last_seq,
                    )
                )
            for line in lines:
                breaks = 0
                if line.kind is LineKind.EVENT and line.event is not None:
                    show(line.event)
                    pos.last_seq = line.event.seq
                elif line.kind is LineKind.RECONNECTING:
                    reconnecting(line.text)
                elif line.kind is LineKind.END and line.run is not None:
                    return report_end(line.run.run_id, RunState(line.run.state), line.run.exit_code)
                elif line.kind is LineKind.ERROR:
                    raise _error(line)
            why = "tcl serve ended the stream early"
        except DaemonError as e:
            why = str(e)
        breaks += 1
        if breaks > MAX_STREAM_BREAKS:
            raise DaemonError(
                f"{why} ({MAX_STREAM_BREAKS} times in a row; see tcl logs -f {pos.run_id})"
            )
        reconnecting(why)
        # the daemon went away (stopped, replaced by a newer one): resume through a new one
        client = ensure_daemon()
        lines = None
