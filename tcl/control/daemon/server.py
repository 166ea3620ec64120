"""Running the ``tcl serve`` daemon: one per state dir, on a Unix socket in that dir.

``tcl serve`` runs it in the foreground (for as long as it is wanted); ``tcl submit`` starts it
detached when none answers, with an idle limit, so nobody has to think about it. It holds
``<state dir>/serve/daemon.lock`` while it lives (a second one refuses to start) and listens on
``daemon.sock`` (0600, in the 0700 ``serve`` dir; connections from other users are dropped:
``tcl.localsock``), removed on exit. Nothing listens on a TCP port and there is no token: the
file system is the authentication, as for dockerd or ssh-agent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import gc
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import uvicorn

from tcl.control.daemon.app import Daemon, create_app
from tcl.control.daemon.identity import current_identity, daemon_dir
from tcl.control.daemon.supervisor import Supervisor
from tcl.control.lifecycle.idlehosts import IdleHosts, IdleSettings
from tcl.control.lifecycle.orphans import OrphanSettings, OrphanSweep
from tcl.control.lifecycle.ownership import ControllerSettings, default_lease_s
from tcl.control.lifecycle.reconcile import RunController
from tcl.control.paths import db_url
from tcl.control.store import Store
from tcl.control.sweep.queue import SweepQueue
from tcl.control.sweep.scheduler import Scheduler, SchedulerSettings
from tcl.localsock import listen_unix

SOCKET = "daemon.sock"
LOCK = "daemon.lock"


class AlreadyRunning(Exception):
    pass


def lock_dir(base: Path) -> int:
    """Hold ``daemon.lock`` for the life of the process (released by the kernel at exit)."""
    fd = os.open(base / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise AlreadyRunning(f"another tcl serve runs for {base.parent}") from None
    return fd


class StopSignals:
    """SIGTERM (systemd, ``kill``) and SIGINT (Ctrl-C) stop the daemon as ``tcl serve --stop``
    does: its controller and scheduler hand back what they hold and its socket goes; then it
    ends by that signal. uvicorn handles both while it serves and raises the signal again once
    it stopped serving: the handler it restores and so calls is this one, not the default one
    that killed the daemon before its cleanup ran. One that comes before uvicorn serves (or
    after) sets ``stop``."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.got: signal.Signals | None = None  # the first one
        self.stop: Callable[[], None] | None = None

    def __enter__(self) -> StopSignals:
        self._previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        return self

    def _handle(self, sig: int, _frame: FrameType | None) -> None:
        self.got = self.got or signal.Signals(sig)
        if self.stop is not None:
            self.stop()

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        if self.got is not None and exc[0] is None:
            # a handler of the process's own (coverage's, which saves its data on SIGTERM) gets
            # the signal next; with Python's Ctrl-C handler or none, the process ends by it,
            # as a signalled process does, for its parent
            before = self._previous[self.got]
            if not callable(before) or before is signal.default_int_handler:
                signal.signal(self.got, signal.SIG_DFL)
            signal.raise_signal(self.got)


async def _start_cli_forks(
    base: Path, server: uvicorn.Server, started: list[subprocess.Popen[bytes]]
) -> None:
    """The CLI fork server (``tcl.cli.forkserver``) beside the daemon, once the daemon answers
    (its imports do not compete with the daemon's start, which a first submit waits for): a
    ``tcl`` command forked from it skips a Python start and its imports. ``TCL_CLI_FORK=0``:
    none."""
    if os.environ.get("TCL_CLI_FORK") == "0":
        return
    from tcl.cli.forkserver import spawn
    from tcl.cli.forkwire import SOCKET as CLI_SOCKET

    while not server.started:
        await asyncio.sleep(0.05)
    fd = os.open(base / "cliforks.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:  # its own log: it never holds the daemon's stdout or stderr (a pipe, under tests)
        started.append(spawn(base / CLI_SOCKET, log=fd))
    finally:
        os.close(fd)


async def _watch_idle(d: Daemon, server: uvicorn.Server) -> None:
    while not server.should_exit:
        if d.idle() or d.shutdown.is_set():
            server.should_exit = True
            return
        await asyncio.sleep(1.0)


async def serve(
    base: Path,
    idle_exit_s: float,
    sched: SchedulerSettings | None,
    runs: ControllerSettings | None = None,
    orphans: OrphanSettings | None = None,
    idle_hosts: IdleSettings | None = None,
    signals: StopSignals | None = None,
) -> None:
    # Listening already: a client may connect before uvicorn accepts.
    sock = listen_unix(base / SOCKET)
    identity = current_identity()
    d = Daemon(identity, Store(db_url()), idle_exit_s)
    if signals is not None:  # one before uvicorn serves (or after): the idle watch stops it
        loop = asyncio.get_running_loop()

        def stop() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed: it is stopping anyway
                loop.call_soon_threadsafe(d.shutdown.set)

        signals.stop = stop
        if signals.got is not None:
            d.shutdown.set()
    stopping = asyncio.Event()
    d.supervisor = Supervisor(stopping)
    d.controller = RunController(
        d.store,
        d.run_control,
        runs,
        on_error=lambda e: d.supervisor.note_error("controller", e),
    )
    d.supervisor.start("controller", d.controller.run)
    if sched is not None:
        d.scheduler = Scheduler(
            SweepQueue(d.store),
            d.scheduler_control,
            sched,
            on_error=lambda e: d.supervisor.note_error("scheduler", e),
            runs=d.controller,  # it owns the sweep's runs once placed
        )
        d.supervisor.start("scheduler", d.scheduler.run)
    sweep = OrphanSweep(
        d.store,
        d.run_control,
        orphans,
        on_error=lambda e: d.supervisor.note_error("orphans", e),
    )
    d.supervisor.start("orphans", sweep.run)
    d.idle_hosts = IdleHosts(
        d.store,
        d.scheduler_control,
        idle_hosts,
        on_error=lambda e: d.supervisor.note_error("idle-hosts", e),
    )
    d.supervisor.start("idle-hosts", d.idle_hosts.run)
    config = uvicorn.Config(
        create_app(d), log_level="warning", lifespan="off", timeout_graceful_shutdown=5
    )
    server = uvicorn.Server(config)
    # What is here by now (the imports, the app) lives as long as the daemon: out of the
    # collector's sight, a full collection no longer walks it (it held every stream for
    # 50-90 ms, a few times a minute while a log was followed)
    gc.freeze()
    watcher = asyncio.create_task(_watch_idle(d, server))
    forks: list[subprocess.Popen[bytes]] = []
    starter = asyncio.create_task(_start_cli_forks(base, server, forks))
    try:
        await server.serve(sockets=[sock])
    finally:
        watcher.cancel()
        starter.cancel()
        stopping.set()
        await d.supervisor.wait()  # the scheduler hands its entries back to the queue
        with contextlib.suppress(OSError):
            (base / SOCKET).unlink()  # ours: the lock kept any other daemon out
        for proc in forks:
            proc.terminate()  # the commands it forked go on: each leads its own session
            try:
                await asyncio.to_thread(proc.wait, 5.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait)
        await d.aclose()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="tcl serve", description=__doc__)
    ap.add_argument(
        "--idle-exit-s",
        type=float,
        default=0.0,
        help="exit after this long with nothing to do (0: never)",
    )
    ap.add_argument(
        "--no-scheduler",
        action="store_true",
        help="do not claim matrix entries (another tcl serve does)",
    )
    ap.add_argument(
        "--lease-s",
        type=float,
        default=default_lease_s(),
        help="a silent daemon's runs and matrix entries go to the next one after this long "
        "(default: $TCL_SERVE_LEASE_S or 30)",
    )
    ap.add_argument(
        "--heartbeat-s",
        type=float,
        default=None,
        help="how often it renews its leases (default: a third of --lease-s, at most 5)",
    )
    ap.add_argument(
        "--batch", type=int, default=SchedulerSettings.batch, help="matrix entries claimed at once"
    )
    ap.add_argument(
        "--name",
        default="",
        help="the name each matrix entry it claims records (default: $TCL_SCHEDULER_NAME or "
        "this machine's hostname)",
    )
    ap.add_argument(
        "--idle-hosts-every-s",
        type=float,
        default=float(os.environ.get("TCL_SERVE_IDLE_HOSTS_EVERY_S") or 30.0),
        help="how often it deletes the nodes of hosts idle past their idle_timeout_s "
        "(default: $TCL_SERVE_IDLE_HOSTS_EVERY_S or 30)",
    )
    ap.add_argument(
        "--orphans-every-s",
        type=float,
        default=float(os.environ.get("TCL_SERVE_ORPHANS_EVERY_S") or 60.0),
        help="how often it ends tasks on hosts that no run names (default: "
        "$TCL_SERVE_ORPHANS_EVERY_S or 60); one is left alone until twice --lease-s old",
    )
    args = ap.parse_args(argv)
    if args.heartbeat_s is None:
        args.heartbeat_s = min(SchedulerSettings.heartbeat_s, args.lease_s / 3)
    if not 0 < args.heartbeat_s < args.lease_s:
        ap.error("--heartbeat-s must be positive and shorter than --lease-s")
    sched = (
        None
        if args.no_scheduler
        else SchedulerSettings(
            lease_s=args.lease_s,
            heartbeat_s=args.heartbeat_s,
            batch=max(1, args.batch),
            name=args.name[:64],
        )
    )
    runs = ControllerSettings(lease_s=args.lease_s, heartbeat_s=args.heartbeat_s)
    orphans = OrphanSettings(every_s=max(0.1, args.orphans_every_s), min_age_s=2 * args.lease_s)
    idle_hosts = IdleSettings(every_s=max(0.1, args.idle_hosts_every_s))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for noisy in ("httpx", "asyncssh"):  # a line per request, per channel
        logging.getLogger(noisy).setLevel(logging.WARNING)
    base = daemon_dir()
    os.chdir(base)  # not the directory of the `tcl submit` that started it (a mount, a repo)
    try:
        lock_dir(base)
    except AlreadyRunning as e:
        print(f"tcl serve: {e}", file=sys.stderr)
        return 1
    with StopSignals() as signals:
        asyncio.run(serve(base, args.idle_exit_s, sched, runs, orphans, idle_hosts, signals))
    return 0
