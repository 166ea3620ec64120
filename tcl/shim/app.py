"""The shim's HTTP API (FastAPI): bearer-token auth, one router, one error table.

Errors are ``{error, detail}`` JSON (``tcl.shim.api.ErrorBody``); ``ERROR_STATUS`` maps the
exception tree to HTTP codes once, walking each exception's MRO.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.types import ASGIApp, Message, Receive, Scope, Send

import tcl
from tcl.shim.api import ErrorBody, HealthInfo, HostInfo, TaskInfo, TaskSpec, TerminateRequest
from tcl.shim.errors import (
    BadRequest,
    Conflict,
    ExecutorError,
    NoCapacity,
    NotFound,
    ShimError,
    Unauthorized,
)
from tcl.shim.service import TaskService

ERROR_STATUS: dict[type[ShimError], int] = {
    BadRequest: 422,
    Unauthorized: 401,
    NotFound: 404,
    Conflict: 409,
    ExecutorError: 502,
    ShimError: 500,
}
_bearer = HTTPBearer(auto_error=False)


def status_for(exc: ShimError) -> int:
    for cls in type(exc).__mro__:
        if cls in ERROR_STATUS:
            return ERROR_STATUS[cls]
    return 500


def _error(status: int, body: ErrorBody, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status, headers=headers)


async def _shim_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ShimError)
    body = ErrorBody(error=exc.code, detail=exc.detail,
                     free=exc.free if isinstance(exc, NoCapacity) else None)
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    return _error(status_for(exc), body, headers)


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    # Never echo the offending input back: it may hold registry credentials.
    detail: list[dict[str, object]] = [
        {"loc": list(e.get("loc", ())), "field": ".".join(str(p) for p in e.get("loc", ())[1:]),
         "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in exc.errors()
    ]
    return _error(422, ErrorBody(error="invalid_request", detail=detail))


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


def create_app(service: TaskService, token: str,
               on_startup: Callable[[], Awaitable[None]] | None = None,
               on_shutdown: Callable[[], Awaitable[None]] | None = None) -> FastAPI:
    async def require_token(
        creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        given = creds.credentials if creds is not None else ""
        if not given or not secrets.compare_digest(given.encode(), token.encode()):
            raise Unauthorized("missing or wrong bearer token")

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
    router = APIRouter(prefix="/api", dependencies=[Depends(require_token)])
    errors: dict[int | str, dict[str, Any]] = {
        401: {"model": ErrorBody}, 404: {"model": ErrorBody}, 409: {"model": ErrorBody},
        422: {"model": ErrorBody},
    }

    @router.get("/healthcheck")
    async def healthcheck() -> HealthInfo:
        return HealthInfo(version=tcl.__version__)

    @router.get("/host")
    async def host() -> HostInfo:
        return service.host_info()

    @router.post("/tasks", status_code=201, responses=errors)
    async def submit(spec: TaskSpec) -> TaskInfo:
        return await service.submit(spec)

    @router.get("/tasks")
    async def list_tasks() -> list[TaskInfo]:
        return service.list_tasks()

    @router.get("/tasks/{task_id}", responses=errors)
    async def get_task(task_id: str) -> TaskInfo:
        return service.get(task_id)

    @router.post("/tasks/{task_id}/terminate", responses=errors)
    async def terminate(task_id: str, req: TerminateRequest | None = None) -> TaskInfo:
        return await service.terminate(task_id, req or TerminateRequest())

    @router.delete("/tasks/{task_id}", status_code=204, responses=errors)
    async def remove(task_id: str) -> None:
        await service.remove(task_id)

    app.include_router(router)
    app.add_middleware(ServerTiming)
    return app
