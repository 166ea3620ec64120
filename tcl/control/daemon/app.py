"""The ``tcl serve`` daemon's HTTP app: submits and follows served as streams of JSON lines.

Each request gets its own :class:`~tcl.control.service.Control` over the daemon's shared SSH
pool and store, so concurrent submits never share per-submit state (staged code, clients),
while all of them reuse the warm connections. A stream whose client goes away (Ctrl-C twice,
the terminal closed) cancels its work: a submit not finished yet cleans up as a cancelled
``tcl submit`` does (its task terminated, partial uploads removed); a follow just stops.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tcl.control.config import load_config_at
from tcl.control.daemon.api import (
    API_VERSION,
    Failure,
    FollowRequest,
    Health,
    Identity,
    Line,
    LineKind,
    RunEnd,
    Status,
    StopRequest,
    SubmitRequest,
)
from tcl.control.daemon.streams import STREAM_QUEUE, QueueObserver, follow_into, kept_into, reported
from tcl.control.daemon.supervisor import Supervisor
from tcl.control.errors import StoreError, SubmitCancelled, TclError
from tcl.control.hostlisting import HostListing, HostsRequest, list_hosts
from tcl.control.lifecycle.idlehosts import IdleHosts
from tcl.control.lifecycle.ownership import run_config
from tcl.control.lifecycle.reconcile import RunController
from tcl.control.lifecycle.submit import submission_from, submit
from tcl.control.matrixlisting import MatrixStatusListing, MatrixStatusRequest, matrix_status
from tcl.control.metriclisting import MetricsListing, MetricsRequest, list_metrics
from tcl.control.runlisting import ListRequest, RunListing, list_runs
from tcl.control.service import Control
from tcl.control.store import Run, Store
from tcl.control.sweep.scheduler import Scheduler

if TYPE_CHECKING:
    from tcl.control.transport.ssh import SshPool

T = TypeVar("T")

log = logging.getLogger("tcl.serve")
NDJSON = "application/x-ndjson"
TRACE = os.environ.get("TCL_TRACE") == "1"  # inherited from the tcl that started the daemon


class Daemon:
    """What outlives a request: the SSH pool, the store, the streams being served."""

    def __init__(self, identity: Identity, store: Store, idle_exit_s: float) -> None:
        self.identity = identity
        self.store = store
        self._pool: SshPool | None = None  # made on first use: asyncssh is imported only then
        self.idle_exit_s = idle_exit_s
        self.started = time.monotonic()
        self.last_active = time.monotonic()
        self.streams = 0
        self.submits = 0
        self.submissions: dict[str, asyncio.Task[None]] = {}
        self.shutdown = asyncio.Event()
        self._work: set[asyncio.Task[None]] = set()
        self.scheduler: Scheduler | None = None  # set by the server when it schedules sweeps
        self.controller: RunController | None = None  # set by the server: it owns live runs
        # idle cloud nodes counting down to their deletion keep it (set by the server)
        self.idle_hosts: IdleHosts | None = None
        # its long-running loops (the scheduler): restarted when they die (set by the server)
        self.supervisor = Supervisor(asyncio.Event())
        self._sched_controls: dict[str, Control] = {}

    @property
    def pool(self) -> SshPool:
        """The SSH pool every request shares, made when a request first needs it (the local
        default never does: its daemon does not import asyncssh)."""
        if self._pool is None:
            from tcl.control.transport.ssh import SshPool

            self._pool = SshPool()
        return self._pool

    def ssh_connects(self) -> int:
        """How many SSH connections the daemon opened (0 when it never made its pool)."""
        return 0 if self._pool is None else self._pool.connects

    def forget_facts(self, host: str) -> None:
        """What the pool learned of ``host`` (its shim dir and token), forgotten."""
        if self._pool is not None:
            self._pool.forget_facts(host)

    def control(self, config_path: str, config_named: bool) -> Control:
        cfg = load_config_at(Path(config_path), config_named)  # read anew: the user may edit it
        return Control(cfg, self.store, lambda: self.pool, shared=True)

    async def on_control(
        self, config_path: str, config_named: bool, work: Callable[[Control], Awaitable[T]]
    ) -> T:
        """``work`` on a Control of the request's config, closed after it."""
        ctl = self.control(config_path, config_named)
        try:
            return await work(ctl)
        finally:
            await ctl.aclose()

    def scheduler_control(self, config_path: str, config_named: bool) -> Control:
        """The Control a matrix's runs are placed and followed with: one per config file for
        the daemon's life (its backends keep their shims' forwards open between entries)."""
        ctl = self._sched_controls.get(config_path)
        if ctl is None:
            ctl = self._sched_controls[config_path] = self.control(config_path, config_named)
        return ctl

    def run_control(self, run: Run) -> Control:
        """The Control its controller advances a run with: the config it was submitted with."""
        path, named = run_config(run)
        return self.scheduler_control(path, named)

    def idle(self) -> bool:
        quiet_s = time.monotonic() - self.last_active
        if self.streams or self.idle_exit_s <= 0 or quiet_s <= self.idle_exit_s:
            return False
        if self.controller is not None and self.controller.busy():
            return False  # it owns live runs: their logs and retries need it
        if self.idle_hosts is not None and self.idle_hosts.pending:
            return False  # nodes wait for it to delete them once their idle time is up
        # a sweep in progress keeps it: queued entries wait for it
        if self.scheduler is None:
            return True
        try:
            return not self.scheduler.busy() and self.scheduler.queue.pending() == 0
        except StoreError:
            return False  # the store does not answer now: there may be entries waiting

    def spawn(self, coro: Awaitable[None]) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._work.add(task)  # a strong reference until it ends, even once its stream is gone
        task.add_done_callback(self._work.discard)
        return task

    async def aclose(self) -> None:
        for task in list(self._work):
            task.cancel()
        if self._work:
            await asyncio.wait(self._work, timeout=30.0)
        for ctl in self._sched_controls.values():
            await ctl.aclose()
        if self._pool is not None:
            await self._pool.close()
        self.store.close()


async def _stream(
    d: Daemon, queue: asyncio.Queue[Line | None], task: asyncio.Task[None], first: Line | None
) -> AsyncIterator[bytes]:
    d.streams += 1
    t0 = time.monotonic()
    try:
        if first is not None:
            yield first.model_dump_json(exclude_defaults=True).encode() + b"\n"
        while (line := await queue.get()) is not None:
            if TRACE and line.kind is not LineKind.EVENT:  # where does a submit's time go?
                log.info("%6.3fs %s %s", time.monotonic() - t0, line.kind.value, line.text)
            yield line.model_dump_json(exclude_defaults=True).encode() + b"\n"
    finally:
        # the client is gone (or everything was sent): stop the work; a submit not finished
        # cleans up after itself (no await here: this generator is being cancelled)
        if not task.done():
            task.cancel()
        d.streams -= 1
        d.last_active = time.monotonic()


class Activity:
    """Each request counts as activity (the idle limit runs from the last one). No token: only
    this user can connect to the daemon's socket (``tcl.localsock``)."""

    def __init__(self, app: ASGIApp, d: Daemon) -> None:
        self.app = app
        self.d = d

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.d.last_active = time.monotonic()
        await self.app(scope, receive, send)


def create_app(d: Daemon) -> ASGIApp:
    app = FastAPI(title="tcl serve", version=d.identity.version, docs_url=None, redoc_url=None)

    @app.get("/api/healthcheck")
    async def healthcheck() -> Health:
        return Health(api_version=API_VERSION, pid=os.getpid(), identity=d.identity)

    @app.get("/api/status")
    async def status() -> Status:
        sched = d.scheduler
        return Status(
            pid=os.getpid(),
            uptime_s=time.monotonic() - d.started,
            ssh_connects=d.ssh_connects(),
            streams=d.streams,
            submits=d.submits,
            scheduler=sched.owner if sched else None,
            entries_running=len(sched.watchers) if sched else 0,
            entries_placed=sched.placed if sched else 0,
            controller=d.controller.owner if d.controller else None,
            runs_owned=len(d.controller.owners) if d.controller else 0,
            loops=d.supervisor.health(),
        )

    @app.post("/api/submit")
    async def post_submit(req: SubmitRequest) -> StreamingResponse:
        queue: asyncio.Queue[Line | None] = asyncio.Queue(STREAM_QUEUE)
        sid = secrets.token_hex(8)
        d.submits += 1

        async def work() -> None:
            ctl = d.control(req.config_path, req.config_named)
            try:
                sub = submission_from(req)
                try:
                    res = await submit(ctl, sub, QueueObserver(queue), check_job=False)
                except asyncio.CancelledError:
                    # cancelled before it reached a step that reports its own cancel (a
                    # Ctrl-C as the stream opened): the stream says so, as for a later one
                    raise SubmitCancelled("cancelled; nothing was placed") from None
                await queue.put(Line(kind=LineKind.SUBMITTED, result=res))
                d.submissions.pop(sid, None)  # started: nothing left to cancel
                if d.controller is not None:
                    d.controller.wake()  # it owns the run from now on, followed or not
                if req.follow:
                    await follow_into(ctl, res.run_id, 0, queue, d.controller)
            finally:
                d.submissions.pop(sid, None)
                await ctl.aclose()

        task = d.spawn(reported(work, queue))
        d.submissions[sid] = task
        first = Line(kind=LineKind.ACCEPTED, submission=sid)
        return StreamingResponse(_stream(d, queue, task, first), media_type=NDJSON)

    @app.post("/api/submissions/{sid}/cancel", status_code=204)
    async def cancel(sid: str) -> Response:
        task = d.submissions.pop(sid, None)
        if task is None:
            raise HTTPException(404, f"no submit {sid!r} under way (started or ended)")
        task.cancel()
        return Response(status_code=204)

    @app.post("/api/follow")
    async def post_follow(req: FollowRequest) -> StreamingResponse:
        queue: asyncio.Queue[Line | None] = asyncio.Queue(STREAM_QUEUE)

        async def work() -> None:
            ctl = d.control(req.config_path, req.config_named)
            try:
                if req.once:
                    await kept_into(ctl, req.run, req.after, queue)
                else:
                    await follow_into(ctl, req.run, req.after, queue, d.controller)
            finally:
                await ctl.aclose()

        task = d.spawn(reported(work, queue))
        return StreamingResponse(_stream(d, queue, task, None), media_type=NDJSON)

    @app.post("/api/runs")
    async def post_runs(req: ListRequest) -> RunListing:
        return await d.on_control(
            req.config_path, req.config_named, lambda ctl: list_runs(ctl, req)
        )

    @app.post("/api/hosts")
    async def post_hosts(req: HostsRequest) -> HostListing:
        return await d.on_control(
            req.config_path, req.config_named, lambda ctl: list_hosts(ctl, req.check)
        )

    @app.post("/api/metrics")
    async def post_metrics(req: MetricsRequest) -> MetricsListing:
        return await d.on_control(
            req.config_path, req.config_named, lambda ctl: list_metrics(ctl, req)
        )

    @app.post("/api/matrices/status")
    async def post_matrix_status(req: MatrixStatusRequest) -> MatrixStatusListing:
        from tcl.control.sweep.queue import SweepQueue

        def read() -> MatrixStatusListing:
            queue = SweepQueue(d.store)
            try:
                return matrix_status(queue, req)
            finally:
                queue.close()

        return await asyncio.to_thread(read)  # the store: off the event loop

    @app.post("/api/stop")
    async def post_stop(req: StopRequest) -> RunEnd:
        from tcl.control.lifecycle.stop import only_active_run_id, stop

        ctl = d.control(req.config_path, req.config_named)
        try:
            ref = req.run or only_active_run_id(ctl)
            run = await stop(ctl, ctl.store.resolve(ref), req.grace_s)
        finally:
            await ctl.aclose()
        return RunEnd(run_id=run.id, state=run.state.value, exit_code=run.exit_code)

    @app.exception_handler(TclError)
    async def user_error(_request: Request, e: TclError) -> JSONResponse:
        body = Failure(detail=str(e), exit_code=e.exit_code)
        return JSONResponse(body.model_dump(), status_code=400)

    @app.post("/api/hosts/{name}/forget", status_code=204)
    async def forget(name: str) -> Response:
        d.forget_facts(name)
        return Response(status_code=204)

    @app.post("/api/shutdown", status_code=204)
    async def shutdown() -> Response:
        d.shutdown.set()
        return Response(status_code=204)

    return Activity(app, d)
