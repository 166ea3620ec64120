"""The runner's HTTP + WebSocket API (FastAPI). Routes only translate; ``Runner`` does the work.

Errors: every ``RunnerError`` becomes ``{error, detail}`` with the status from ``ERROR_STATUS``
(looked up along the exception's MRO); schema errors become 422 naming each field.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request, WebSocket, WebSocketDisconnect
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tcl import __version__
from tcl.runner import errors
from tcl.runner.api import (
    EventsPage,
    HealthInfo,
    JobSpec,
    Metrics,
    StateInfo,
    StopRequest,
)
from tcl.runner.service import Runner

ERROR_STATUS: dict[type[errors.RunnerError], int] = {
    errors.InvalidRequest: 400,
    errors.Conflict: 409,
    errors.InvalidSpec: 422,
    errors.UnsafeArchive: 422,
    errors.PayloadTooLarge: 413,
    errors.ExecutorError: 500,
    errors.RunnerError: 500,
}
MAX_JSON_BODY_BYTES = 1024 * 1024  # every body but the code upload
MAX_WAIT_S = 60.0
WS_IDLE_WAIT_S = 30.0


def status_of(exc: errors.RunnerError) -> int:
    for cls in type(exc).__mro__:
        if cls in ERROR_STATUS:
            return ERROR_STATUS[cls]
    return 500


def _error(status: int, code: str, detail: str | list[dict[str, object]]) -> JSONResponse:
    return JSONResponse({"error": code, "detail": detail}, status_code=status)


class BodyLimit:
    """413 for a JSON body over the limit (the code upload has its own, larger limit)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == "/api/code":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            response = _error(413, errors.PayloadTooLarge.code, f"body over {self.max_bytes} bytes")
            await response(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise errors.PayloadTooLarge(f"body over {self.max_bytes} bytes")
            return message

        await self.app(scope, limited, send)


def get_runner(request: Request) -> Runner:
    runner: Runner | None = request.app.state.runner
    assert runner is not None, "app created without a runner (openapi only)"
    return runner


RunnerDep = Annotated[Runner, Depends(get_runner)]


def create_app(runner: Runner | None) -> FastAPI:
    app = FastAPI(title="tcl-runner", version=__version__, docs_url=None, redoc_url=None)
    app.state.runner = runner
    app.add_middleware(BodyLimit, max_bytes=MAX_JSON_BODY_BYTES)

    @app.exception_handler(errors.RunnerError)
    async def runner_error(_: Request, exc: errors.RunnerError) -> JSONResponse:
        if isinstance(exc, errors.InvalidSpec):
            return _error(422, exc.code, [{"field": exc.field, "msg": exc.detail}])
        return _error(status_of(exc), exc.code, exc.detail)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        detail: list[dict[str, object]] = []
        for e in exc.errors():
            loc = [str(p) for p in e.get("loc", ()) if p != "body"]
            detail.append(
                {
                    "field": ".".join(loc),
                    "msg": str(e.get("msg", "")),
                    "type": str(e.get("type", "")),
                }
            )
        in_body = any(e.get("loc", ("",))[0] == "body" for e in exc.errors())
        return _error(422, "invalid_spec" if in_body else "invalid_request", detail)

    @app.get("/api/healthcheck", response_model=HealthInfo)
    async def healthcheck(runner: RunnerDep) -> HealthInfo:
        return runner.health()

    @app.post("/api/submit", response_model=StateInfo)
    async def submit(spec: JobSpec, runner: RunnerDep) -> StateInfo:
        return _state(runner, runner.submit(spec))

    @app.put("/api/code", response_model=StateInfo, responses={413: {}, 400: {}, 422: {}})
    async def code(
        request: Request,
        runner: RunnerDep,
        x_code_sha256: Annotated[str | None, Header()] = None,
        content_length: Annotated[int | None, Header()] = None,
    ) -> StateInfo:
        return _state(
            runner, await runner.upload_code(request.stream(), x_code_sha256, content_length)
        )

    @app.post("/api/run", response_model=StateInfo)
    async def run(runner: RunnerDep) -> StateInfo:
        return _state(runner, await asyncio.to_thread(runner.run))

    @app.post("/api/stop", response_model=StateInfo)
    async def stop(runner: RunnerDep, body: StopRequest | None = None) -> StateInfo:
        return _state(runner, runner.stop((body or StopRequest()).grace_s))

    @app.get("/api/events", response_model=EventsPage)
    async def events(
        runner: RunnerDep,
        after: Annotated[int, Query(ge=0)] = 0,
        wait: Annotated[float, Query(ge=0, le=MAX_WAIT_S)] = 0,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> EventsPage:
        return await runner.events_page(after, wait, limit)

    @app.get("/api/metrics", response_model=Metrics)
    async def metrics(runner: RunnerDep) -> Metrics:
        from tcl.runner.metrics import collect

        pid = runner.executor.pid if runner.executor and runner.state.value == "running" else None
        return await asyncio.to_thread(collect, pid)

    @app.websocket("/api/logs")
    async def logs(ws: WebSocket, after: int = 0) -> None:
        runner: Runner = ws.app.state.runner
        await ws.accept()
        sender = asyncio.create_task(_push(ws, runner, max(0, after)))
        try:
            # The client sends nothing; receive() returns when it goes away.
            receiver = asyncio.create_task(ws.receive())
            done, _ = await asyncio.wait({sender, receiver}, return_when=asyncio.FIRST_COMPLETED)
            if sender in done:
                receiver.cancel()
                if sender.exception() is None:
                    await ws.close(1000)
            else:
                sender.cancel()
        except WebSocketDisconnect:
            sender.cancel()
        finally:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender

    return app


async def _push(ws: WebSocket, runner: Runner, after: int) -> None:
    """Send every event past ``after`` as a text message; return once the log is finished."""
    log = runner.log
    cursor = after
    while True:
        page = log.read_raw(cursor)
        for line in page.lines:
            await ws.send_text(line.decode())
        cursor = page.next
        if page.more:
            continue
        if log.finished and cursor >= log.last_seq:
            return
        await log.wait(cursor, WS_IDLE_WAIT_S)


def _state(runner: Runner, state: Any) -> StateInfo:
    return StateInfo(state=state, exit_code=runner.machine.exit_code)
