"""The shim's HTTP API (FastAPI): bearer-token auth, a body limit, one router, one error table.

Every request passes, outermost first: ``ServerTiming`` → ``BearerAuth`` → ``BodyLimit`` →
FastAPI. Auth comes before anything reads the body: FastAPI reads and parses a body before any
dependency runs, so a token check in a dependency would let anyone make the shim buffer a body
of any size. ``BearerAuth`` covers every path (``/openapi.json`` and ``/docs`` included).

Errors are ``{error, detail}`` JSON (``tcl.shim.api.ErrorBody``); ``ERROR_STATUS`` maps the
exception tree to HTTP codes once, walking each exception's MRO. Starlette's own HTTP errors
(unknown route, wrong method, body too large) are translated into that tree first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, FastAPI, HTTPException, Path, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import tcl
from tcl.shim.api import (
    MAX_START_WAIT_S,
    TASK_ID_MAX_LEN,
    TASK_ID_PATTERN,
    ErrorBody,
    HealthInfo,
    HostInfo,
    PreemptionNotice,
    TaskInfo,
    TaskSpec,
    TerminateRequest,
)
from tcl.shim.errors import (
    BadRequest,
    Conflict,
    ExecutorError,
    MethodNotAllowed,
    MountFailed,
    NoCapacity,
    NotFound,
    PayloadTooLarge,
    ShimError,
    Unauthorized,
)
from tcl.shim.service import TaskService
from tcl.tokenfile import bearer_matches

log = logging.getLogger(__name__)

# The largest TaskSpec a client sends is a few KiB (an ssh key, a short env); 1 MiB leaves
# room for big env values while bounding what an authenticated client can make the shim hold.
MAX_BODY_BYTES = 1024 * 1024

ERROR_STATUS: dict[type[ShimError], int] = {
    BadRequest: 422,
    Unauthorized: 401,
    NotFound: 404,
    MethodNotAllowed: 405,
    PayloadTooLarge: 413,
    Conflict: 409,
    MountFailed: 424,  # the task depends on a mount that failed: not the shim's own error
    ExecutorError: 502,
    ShimError: 500,
}
# Starlette's HTTP errors, translated into the shim's tree (other codes keep their status).
# 400 is FastAPI's "error parsing the body" (e.g. not UTF-8): as bad as invalid JSON, so 422.
_HTTP_ERRORS: dict[int, type[ShimError]] = {
    400: BadRequest,
    401: Unauthorized,
    404: NotFound,
    405: MethodNotAllowed,
    413: PayloadTooLarge,
}
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
# Documents the scheme in OpenAPI. The check itself is BearerAuth, which runs before any body
# is read; by the time this dependency runs the token has been verified.
_bearer = HTTPBearer(auto_error=False, description="The token in the shim's --token-file.")

StartWaitParam = Annotated[
    float,
    Query(ge=0, le=MAX_START_WAIT_S, description="seconds to wait for the task to start or end"),
]
TaskIdParam = Annotated[
    str, Path(min_length=1, max_length=TASK_ID_MAX_LEN, pattern=TASK_ID_PATTERN)
]


def status_for(exc: ShimError) -> int:
    for cls in type(exc).__mro__:
        if cls in ERROR_STATUS:
            return ERROR_STATUS[cls]
    return 500


def _render(status: int, body: ErrorBody, headers: Mapping[str, str] | None) -> JSONResponse:
    return JSONResponse(body.model_dump(exclude_none=True), status, dict(headers or {}) or None)


def error_response(exc: ShimError, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """A ShimError as an HTTP response: its status from the table, ``{error, detail}``."""
    free = exc.free if isinstance(exc, NoCapacity) else None
    all_headers = dict(headers or {})
    if isinstance(exc, Unauthorized):
        all_headers["WWW-Authenticate"] = "Bearer"
    body = ErrorBody(error=exc.code, detail=exc.detail, free=free)
    return _render(status_for(exc), body, all_headers)


async def _shim_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ShimError)
    return error_response(exc)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(_allowed_methods(request))
    cls = _HTTP_ERRORS.get(exc.status_code)
    if cls is None:
        body = ErrorBody(error=f"http_{exc.status_code}", detail=str(exc.detail))
        return _render(exc.status_code, body, headers)
    return error_response(cls(str(exc.detail)), headers)


def _allowed_methods(request: Request) -> list[str]:
    # Starlette's 405 names the methods of the first route on the path only (POST /api/tasks
    # answered "Allow: POST" although GET is served too): ask every route about every method.
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(r.matches({**request.scope, "method": method})[0] is Match.FULL for r in routes)
    ]


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    # Never echo the offending input back: it may hold registry credentials.
    detail: list[dict[str, object]] = [
        {
            "loc": list(e.get("loc", ())),
            "field": ".".join(str(p) for p in e.get("loc", ())[1:]),
            "msg": e.get("msg", ""),
            "type": e.get("type", ""),
        }
        for e in exc.errors()
    ]
    return _render(422, ErrorBody(error="invalid_request", detail=detail), None)


async def _internal_error(_: Request, exc: Exception) -> JSONResponse:
    # Starlette logs the exception and its traceback after this answer; the client gets no
    # internals.
    return error_response(ShimError("internal error (see the shim's log)"))


class ServerTiming:
    """ASGI middleware: ``Server-Timing: app;dur=<ms>`` on every response, the time the shim
    spent answering (excludes network and queueing), so clients and benchmarks can tell the
    shim's own latency from the transport's."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()

        async def timed_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                dur_ms = (time.perf_counter() - t0) * 1000
                headers = list(message.get("headers", []))
                headers.append((b"server-timing", f"app;dur={dur_ms:.3f}".encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, timed_send)


class BearerAuth:
    """ASGI middleware: refuse any request without ``Authorization: Bearer <token>``, before
    anything reads its body. Lifespan events pass."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        if not token:
            raise ValueError("the shim needs a non-empty bearer token")
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self._authorized(scope):
            await self.app(scope, receive, send)
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # policy violation
        else:
            response = error_response(Unauthorized("missing or wrong bearer token"))
            await response(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        return bearer_matches(scope.get("headers", []), self._token)


class _BodyTooLarge(HTTPException):
    # An HTTPException, because FastAPI passes those through when raised while it reads the
    # body (anything else becomes a 400 "error parsing the body").
    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"the request body is over the shim's limit of {max_bytes} bytes")


class BodyLimit:
    """ASGI middleware: refuse a request body over ``max_bytes``. A Content-Length over it is
    refused at once (nothing read); a body without one (chunked) is counted as it streams in,
    and reading stops at the first chunk past the limit."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        received = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _BodyTooLarge(self.max_bytes)
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except _BodyTooLarge:
            # FastAPI answers this itself through the error table; this is for any other
            # reader of the body that lets it escape.
            if started:
                raise
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        exc = _BodyTooLarge(self.max_bytes)
        await error_response(PayloadTooLarge(exc.detail))(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers", []):
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the server refuses these; otherwise the streaming count applies
    return None


def create_app(
    service: TaskService,
    token: str,
    on_startup: Callable[[], Awaitable[None]] | None = None,
    on_shutdown: Callable[[], Awaitable[None]] | None = None,
    max_body_bytes: int = MAX_BODY_BYTES,
) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if on_startup is not None:
            await on_startup()
        try:
            yield
        finally:
            if on_shutdown is not None:
                await on_shutdown()

    app = FastAPI(title="tcl-shim", version=tcl.__version__, lifespan=lifespan)
    app.add_exception_handler(ShimError, _shim_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _internal_error)

    def documented(*codes: int) -> dict[int | str, dict[str, Any]]:
        return {code: {"model": ErrorBody} for code in codes}

    router = APIRouter(
        prefix="/api",
        dependencies=[Security(_bearer)],
        responses={401: {"model": ErrorBody, "description": "Missing or wrong bearer token"}},
    )

    @router.get("/healthcheck")
    async def healthcheck() -> HealthInfo:
        return HealthInfo(version=tcl.__version__, mounts=await service.mounts.health())

    @router.get("/host")
    async def host() -> HostInfo:
        return service.host_info()

    @router.post("/tasks", status_code=201, responses=documented(409, 413, 422, 424, 502))
    async def submit(spec: TaskSpec) -> TaskInfo:
        return await service.submit(spec)

    @router.get("/tasks")
    async def list_tasks() -> list[TaskInfo]:
        return service.list_tasks()

    @router.get("/tasks/{task_id}", responses=documented(404, 422))
    async def get_task(task_id: TaskIdParam, wait_s: StartWaitParam = 0.0) -> TaskInfo:
        """The task; with ``wait_s``, once it runs (its runner's port known) or ended, or after
        ``wait_s`` seconds with where it stands (a launch waits for its task's start)."""
        if wait_s > 0:
            return await service.wait_started(task_id, wait_s)
        return service.get(task_id)

    @router.post("/tasks/{task_id}/terminate", responses=documented(404, 413, 422, 502))
    async def terminate(task_id: TaskIdParam, req: TerminateRequest | None = None) -> TaskInfo:
        return await service.terminate(task_id, req or TerminateRequest())

    @router.delete("/tasks/{task_id}", status_code=204, responses=documented(404, 409, 422, 502))
    async def remove(task_id: TaskIdParam) -> None:
        await service.remove(task_id)

    @router.post("/preemption", responses=documented(413, 422))
    async def preemption(notice: PreemptionNotice | None = None) -> list[TaskInfo]:
        """The host is going away: every live task is terminated as ``preempted`` (its job is
        sent SIGTERM to checkpoint). Answers at once with the tasks notified."""
        return service.preempt(notice or PreemptionNotice())

    app.include_router(router)
    # add_middleware puts each one outside the ones before it: auth must wrap the body limit.
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    app.add_middleware(BearerAuth, token=token)
    app.add_middleware(ServerTiming)
    return app
