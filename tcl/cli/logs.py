"""``tcl logs [RUN] [-f] [--since] [--tail] [--timestamps]``: from the local copy, refreshed."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from tcl.cli import follow as follow_cmd
from tcl.cli._common import err, fail, globals_of
from tcl.cli.render import print_event
from tcl.control.errors import DaemonError, TclError
from tcl.control.logcache import LogCache
from tcl.runner.api import EventKind

if TYPE_CHECKING:
    from tcl.control.daemon.client import DaemonClient
    from tcl.control.logcache import KeptEvent
    from tcl.control.store import Run

_DURATION = re.compile(r"^(?:\d+(?:\.\d+)?[smhd])+$")
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> float:
    """``90s``, ``10m``, ``2h``, ``1d``, ``1h30m`` ago, or an ISO timestamp → unix seconds."""
    if _DURATION.match(text):
        ago = sum(float(n) * _UNIT_S[unit] for n, unit in _PART.findall(text))
        return time.time() - ago
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise fail(f"--since {text!r}: use 10m, 2h, 1h30m, 1d or an ISO time") from None


def cmd_logs(
    ctx: typer.Context,
    run_ref: Annotated[
        str | None,
        typer.Argument(metavar="[RUN]", help="Run id, prefix or name (default: the newest run)."),
    ] = None,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep following.")] = False,
    since: Annotated[
        str | None, typer.Option("--since", help="10m, 2h, 1h30m or an ISO time.")
    ] = None,
    tail: Annotated[int | None, typer.Option("--tail", min=0, help="Last N lines.")] = None,
    timestamps: Annotated[bool, typer.Option("--timestamps", "-t", help="Prefix times.")] = False,
    node: Annotated[
        int | None, typer.Option("--node", min=0, help="Only this node of a multi-node run.")
    ] = None,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw", help="Pass the job's terminal control sequences (default: colours only)."
        ),
    ] = False,
) -> None:
    """Print a run's logs (kept locally, so they outlive the host)."""
    since_ts = parse_since(since) if since else None

    def show(kept: list[KeptEvent]) -> int:
        """Print the kept lines; return the ``seq`` of the last one read, where a follow goes
        on (what the run's owner keeps after this read is the follow's to show: the cache's
        last ``seq``, looked at later, would skip it)."""
        events = [
            e
            for e in kept
            if (since_ts is None or e.ts >= since_ts) and (node is None or e.node == node)
        ]
        if tail is not None:
            events = events[-tail:] if tail else []
        for e in events:
            print_event(e, timestamps, raw)
        return kept[-1].seq if kept else 0

    def show_followed(e: KeptEvent) -> None:
        if node is None or e.node == node:
            print_event(e, timestamps, raw)

    from tcl.control.daemon.client import answering_daemon

    state: dict[str, str] = {}
    client = answering_daemon()
    try:
        try:
            if client is None:
                raise _NoDaemon
            code = _served(ctx, client, run_ref, follow, show, show_followed, state)
        except _NoDaemon:
            code = _here(ctx, run_ref, follow, show, raw, timestamps, node, state)
    except KeyboardInterrupt:
        raise typer.Exit(follow_cmd.detached(state.get("run_id", run_ref or ""))) from None
    except TclError as e:
        raise fail(str(e), e.exit_code) from None
    if code is not None:
        raise typer.Exit(code)


class _NoDaemon(Exception):
    """No daemon serves this command: it is done in this process."""


def _served(
    ctx: typer.Context,
    client: DaemonClient,
    run_ref: str | None,
    follow: bool,
    show: Callable[[list[KeptEvent]], int],
    show_followed: Callable[[KeptEvent], None],
    state: dict[str, str],
) -> int | None:
    """Through the daemon (it keeps the store open, and owns the run): the kept lines once the
    host was asked for more, then, with ``follow``, the run to its end."""
    from tcl.cli.served import follow_served, kept_served
    from tcl.control.daemon.api import FollowRequest

    path, named = globals_of(ctx).config_location()
    req = FollowRequest(config_path=path, config_named=named, run=run_ref or "", once=True)
    try:
        run_id, kept = kept_served(client, req)
    except DaemonError:
        # it went away since it answered (its idle exit), or broke: nothing was printed yet,
        # so all of it is read here, as with no daemon
        raise _NoDaemon from None
    state["run_id"] = run_id
    last = show(kept)
    if not follow:
        return None
    again = req.model_copy(update={"run": run_id, "after": last, "once": False})
    return follow_served(client, again, show_followed)


def _here(
    ctx: typer.Context,
    run_ref: str | None,
    follow: bool,
    show: Callable[[list[KeptEvent]], int],
    raw: bool,
    timestamps: bool,
    node: int | None,
    state: dict[str, str],
) -> int | None:
    """With no daemon: the store is opened here, and the host asked from here."""
    g = globals_of(ctx)

    async def go() -> Run | None:
        from tcl.control.catchup import catch_up, newest_run_id
        from tcl.control.service import Control

        ctl = Control(g.config())
        try:
            ref = run_ref
            if ref is None:
                ref = newest_run_id(ctl)
                err.print(f"logs of the most recent run, {ref}", markup=False)
            caught = await catch_up(ctl, ref)
            run_id = state["run_id"] = caught.run_id
            if caught.unreachable and not follow:
                err.print(f"warning: {caught.unreachable}; showing kept logs", markup=False)
            last = show(list(LogCache(run_id).read(kind=EventKind.LOG)))
            if not follow:
                return None
            # one Control: the connection made for the catch-up is reused for following
            return await follow_cmd.follow_with(
                ctl, run_id, timestamps, after=last, node=node, raw=raw
            )
        finally:
            await ctl.aclose()

    import asyncio  # only when it runs: a fast CLI start

    final = asyncio.run(go())
    return follow_cmd.finished(final) if final is not None else None


def register(app: typer.Typer) -> None:
    app.command("logs")(cmd_logs)
