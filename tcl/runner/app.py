"""The runner's HTTP + WebSocket API. Routes only translate; ``Runner`` does the work.

Every route but ``/api/healthcheck`` needs the per-task bearer token (``BearerAuth``: checked
before any body is read, on the WebSocket handshake too): on the process executor the runner
listens on the host's loopback, which every local user can reach. Bodies other than the code
upload must be JSON (415 otherwise), so a web page cannot post a "simple" cross-origin form or
``text/plain`` request; no CORS headers are ever sent.

Built on Starlette (what FastAPI is made of) rather than FastAPI itself: importing FastAPI
doubled the runner's start-up time, which is part of every submit's latency. Bodies and
queries are still validated by the pydantic models of ``api.py``, and ``ROUTES`` (one table:
method, path, models) drives both the app and the generated OpenAPI spec (``openapi.py``).

Errors: every ``RunnerError`` becomes ``{error, detail}`` with the status from ``ERROR_STATUS``
(looked up along the exception's MRO); schema errors become 422 naming each field; Starlette's
own (404 unknown route, 405 wrong method) get the same shape.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route, WebSocketRoute

from tcl.runner import errors, wsroutes
from tcl.runner.api import (
    CachedCodeRequest,
    EventsPage,
    EventsQuery,
    HealthInfo,
    JobSpec,
    Metrics,
    RunnerState,
    SessionInfo,
    StartRequest,
    StateInfo,
    StopRequest,
    SyncAck,
    SyncPatch,
)
from tcl.runner.middleware import BearerAuth, BodyLimit
from tcl.runner.middleware import error_response as _error
from tcl.runner.service import Runner

ERROR_STATUS: dict[type[errors.RunnerError], int] = {
    errors.InvalidRequest: 400,
    errors.Conflict: 409,
    errors.CodeNotCached: 404,
    errors.InvalidSpec: 422,
    errors.UnsafeArchive: 422,
    errors.PayloadTooLarge: 413,
    errors.StorageError: 500,
    errors.ExecutorError: 500,
    errors.RunnerError: 500,
}
# Starlette's own errors: status -> wire ``error``.
HTTP_ERROR_CODES = {404: "not_found", 405: "method_not_allowed"}
MAX_JSON_BODY_BYTES = 1024 * 1024  # every body but the code upload and a sync patch
# A sync patch carries changed files (base64): tcl.control.treesync caps their bytes below this.
BODY_LIMITS = {"/api/sync": 96 * 1024 * 1024}


class RequestInvalid(Exception):
    """A body or query that does not match its model: 422 with one entry per field."""

    def __init__(self, code: str, detail: list[dict[str, object]]) -> None:
        super().__init__(code)
        self.code = code
        self.detail = detail


def status_of(exc: errors.RunnerError) -> int:
    for cls in type(exc).__mro__:
        if cls in ERROR_STATUS:
            return ERROR_STATUS[cls]
    return 500


def _json(model: BaseModel, status: int = 200) -> Response:
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


def _fields(e: ValidationError, prefix: str = "") -> list[dict[str, object]]:
    return [
        {
            "field": prefix + ".".join(str(p) for p in err["loc"]),
            "msg": err["msg"],
            "type": err["type"],
        }
        for err in e.errors()
    ]


M = TypeVar("M", bound=BaseModel)


def _parse(model: type[M], raw: bytes | dict[str, str], where: str) -> M:
    try:
        if isinstance(raw, bytes):
            return model.model_validate_json(raw or b"{}")
        # From strings, as JSON would be: strict numbers take "3" but not "true".
        return model.model_validate_strings(raw)
    except ValidationError as e:
        code = "invalid_spec" if model in (JobSpec, StartRequest) else "invalid_request"
        raise RequestInvalid(code, _fields(e, "" if where == "body" else f"{where}.")) from e


# -- handlers ------------------------------------------------------------------------------

Handler = Callable[[Request, Runner], Awaitable[Response]]


async def healthcheck(_: Request, runner: Runner) -> Response:
    return _json(runner.health())


async def submit(request: Request, runner: Runner) -> Response:
    spec = _parse(JobSpec, await request.body(), "body")
    return _state(runner, runner.submit(spec))


async def code(request: Request, runner: Runner) -> Response:
    length = request.headers.get("content-length")
    size = int(length) if length and length.isdigit() else None
    state = await runner.upload_code(request.stream(), request.headers.get("x-code-sha256"), size)
    return _state(runner, state)


async def cached_code(request: Request, runner: Runner) -> Response:
    body = _parse(CachedCodeRequest, await request.body(), "body")
    return _state(runner, await runner.use_cached_code(body.sha256))


async def start(request: Request, runner: Runner) -> Response:
    body = _parse(StartRequest, await request.body(), "body")
    return _state(runner, await runner.start(body.spec))


async def run(_: Request, runner: Runner) -> Response:
    return _state(runner, await asyncio.to_thread(runner.run))


async def stop(request: Request, runner: Runner) -> Response:
    body = _parse(StopRequest, await request.body(), "body")
    sig = signal.SIGABRT if body.dump_stacks else signal.SIGTERM
    return _state(runner, runner.stop(body.grace_s, sig))


async def events(request: Request, runner: Runner) -> Response:
    q = _parse(EventsQuery, dict(request.query_params), "query")
    return _json(await runner.events_page(q.after, q.wait, q.limit))


async def metrics(_: Request, runner: Runner) -> Response:
    from tcl.runner.metrics import collect

    running = runner.executor is not None and runner.state is RunnerState.RUNNING
    pid = runner.executor.pid if running and runner.executor else None
    return _json(await asyncio.to_thread(collect, pid))


async def session(_: Request, runner: Runner) -> Response:
    return _json(runner.session_info())


async def sync(request: Request, runner: Runner) -> Response:
    body = _parse(SyncPatch, await request.body(), "body")
    return _json(await asyncio.to_thread(runner.sync, body))


def _state(runner: Runner, state: RunnerState) -> Response:
    return _json(StateInfo(state=state, exit_code=runner.machine.exit_code))


@dataclass(frozen=True)
class ApiRoute:
    """One row of the API: drives the app and the OpenAPI spec."""

    method: str
    path: str
    handler: Handler
    summary: str
    response: type[BaseModel]
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    errors: tuple[int, ...] = ()
    raw_body: str | None = None  # media type of a non-JSON body
    public: bool = False  # reachable without the bearer token (else 401 is documented)


ROUTES: tuple[ApiRoute, ...] = (
    ApiRoute(
        "GET", "/api/healthcheck", healthcheck, "Service, version, state", HealthInfo, public=True
    ),
    ApiRoute(
        "POST",
        "/api/submit",
        submit,
        "Submit the job spec (repeatable with the same one)",
        StateInfo,
        body=JobSpec,
        errors=(409, 413, 422),
    ),
    ApiRoute(
        "PUT",
        "/api/code",
        code,
        "Upload the code tar.gz (header X-Code-Sha256)",
        StateInfo,
        errors=(400, 409, 413, 422),
        raw_body="application/gzip",
    ),
    ApiRoute(
        "POST",
        "/api/code/cached",
        cached_code,
        "Install the code from the host's tree cache (404 code_not_cached: upload it)",
        StateInfo,
        body=CachedCodeRequest,
        errors=(400, 404, 409, 422),
    ),
    ApiRoute("POST", "/api/run", run, "Start the job", StateInfo, errors=(409,)),
    ApiRoute(
        "POST",
        "/api/start",
        start,
        "Submit, the code from the host's tree cache, run: one request (waiting_code: upload "
        "it, then /api/run)",
        StateInfo,
        body=StartRequest,
        errors=(409, 413, 422),
    ),
    ApiRoute(
        "POST",
        "/api/stop",
        stop,
        "SIGTERM the job's group, SIGKILL after grace_s (a repeat only brings that closer)",
        StateInfo,
        body=StopRequest,
        errors=(422,),
    ),
    ApiRoute(
        "GET",
        "/api/events",
        events,
        "Events after a seq; wait long-polls",
        EventsPage,
        query=EventsQuery,
        errors=(422,),
    ),
    ApiRoute("GET", "/api/metrics", metrics, "CPU, memory, accelerators", Metrics),
    ApiRoute(
        "GET",
        "/api/session",
        session,
        "The interactive session's state and key (409 when the job is not one)",
        SessionInfo,
        errors=(409,),
    ),
    ApiRoute(
        "POST",
        "/api/sync",
        sync,
        "Apply a live code change to the working dir: all files or none (409 sync_conflict "
        "names the paths changed under it)",
        SyncAck,
        body=SyncPatch,
        errors=(400, 409, 413, 422),
    ),
)
# WebSockets (tcl.runner.wsroutes): /api/logs?after=SEQ (query model LogsQuery), the job's
# events as they happen; /api/forward, a byte stream to the job's interactive session.


OPEN_PATHS = frozenset(r.path for r in ROUTES if r.public)  # the token is needed elsewhere
RAW_BODY_PATHS = frozenset({"/api/code"})


def _endpoint(handler: Handler, runner: Runner | None) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        assert runner is not None, "app created without a runner (openapi only)"
        return await handler(request, runner)

    return endpoint


def create_app(runner: Runner | None, token: str | None) -> Starlette:
    """The runner's app; ``token`` is required to serve (None only for the OpenAPI spec)."""
    if runner is not None and not token:
        raise ValueError("a runner app needs a bearer token")

    async def runner_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, errors.RunnerError)
        if isinstance(exc, errors.InvalidSpec):
            return _error(422, exc.code, [{"field": exc.field, "msg": exc.detail}])
        return _error(status_of(exc), exc.code, exc.detail)

    async def request_invalid(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestInvalid)
        return _error(422, exc.code, exc.detail)

    async def http_error(_: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = HTTP_ERROR_CODES.get(exc.status_code, "http_error")
        response = _error(exc.status_code, code, exc.detail)
        response.headers.update(exc.headers or {})  # 405 keeps its Allow header
        return response

    async def internal(_: Request, exc: Exception) -> Response:
        # A bug, not bad input: still JSON, without internals beyond the exception's type.
        return _error(500, "internal_error", type(exc).__name__)

    routes: list[Route | WebSocketRoute] = [
        Route(r.path, _endpoint(r.handler, runner), methods=[r.method]) for r in ROUTES
    ]
    routes.append(WebSocketRoute("/api/logs", wsroutes.logs_endpoint(runner)))
    routes.append(WebSocketRoute("/api/forward", wsroutes.forward_endpoint(runner)))
    app = Starlette(
        routes=routes,
        exception_handlers={
            errors.RunnerError: runner_error,
            RequestInvalid: request_invalid,
            HTTPException: http_error,
            Exception: internal,
        },
    )
    app.add_middleware(BodyLimit, max_bytes=MAX_JSON_BODY_BYTES, limits=BODY_LIMITS)
    if token:
        # outermost: before the body limit
        app.add_middleware(
            BearerAuth, token=token, open_paths=OPEN_PATHS, raw_body_paths=RAW_BODY_PATHS
        )
    app.state.runner = runner
    return app
