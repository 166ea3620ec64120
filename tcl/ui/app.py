"""The ``tcl ui`` app: the page, its static files, and the API routers (one per area), all
behind :class:`~tcl.ui.guard.Guard`. Errors of the control plane are mapped to HTTP once, here
(by the exception's MRO), as ``{error, detail}``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import HTTPException
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp

from tcl import __version__
from tcl.control.errors import (
    AgentError,
    ConfigError,
    RunNotFoundError,
    SshError,
    StoreError,
    SweepError,
    TclError,
)
from tcl.ui import hosts, logstream, matrices, runs
from tcl.ui.api import Info
from tcl.ui.context import Ui
from tcl.ui.guard import Guard, cookie_name, query_token

STATIC = Path(__file__).parent / "static"
# The page loads only its own files and talks only to its own origin.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; "
    "connect-src 'self' ws://127.0.0.1:* ws://localhost:*; frame-ancestors 'none'; "
    "base-uri 'none'; form-action 'none'"
)
_STATUS: dict[type[TclError], tuple[int, str]] = {
    RunNotFoundError: (404, "not_found"),
    ConfigError: (400, "config"),
    SweepError: (400, "sweep"),
    StoreError: (500, "store"),
    AgentError: (502, "host"),
    SshError: (502, "host"),
    TclError: (400, "error"),
}


def _tcl_error(_request: Request, exc: Exception) -> Response:
    status, code = next(
        (_STATUS[cls] for cls in type(exc).__mro__ if cls in _STATUS), (500, "error")
    )
    return JSONResponse({"error": code, "detail": str(exc)}, status_code=status)


def _http_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {401: "unauthorized", 403: "forbidden", 404: "not_found"}.get(exc.status_code, "error")
    return JSONResponse({"error": code, "detail": exc.detail}, status_code=exc.status_code)


def _secured(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"  # the first URL carries the token
    response.headers["Cache-Control"] = "no-store"
    return response


def create_app(ui: Ui) -> ASGIApp:
    app = FastAPI(
        title="tcl ui", version=__version__, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.ui = ui
    app.add_exception_handler(TclError, _tcl_error)
    app.add_exception_handler(HTTPException, _http_error)
    for router in (runs.router, matrices.router, hosts.router, logstream.router):
        app.include_router(router)

    @app.get("/api/info")
    def info() -> Info:
        return Info(version=__version__, allow_actions=ui.settings.allow_actions)

    @app.get("/", include_in_schema=False)
    def index(request: Request) -> Response:
        response = _secured(FileResponse(STATIC / "index.html", media_type="text/html"))
        if query_token(request.scope) is not None:  # the Guard checked it: keep it as a cookie
            response.set_cookie(
                cookie_name(ui.settings.port),
                ui.settings.token,
                httponly=True,
                samesite="strict",
                path="/",
            )
        return response

    @app.middleware("http")
    async def headers(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        return _secured(await call_next(request))

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return Guard(app, ui.settings.token, ui.settings.port)
