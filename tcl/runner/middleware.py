"""The runner app's middleware: the bearer token and JSON-only bodies (``BearerAuth``), body
size limits (``BodyLimit``), and the ``{error, detail}`` body every error answers with."""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tcl.runner import errors
from tcl.tokenfile import bearer_matches


def error_response(status: int, code: str, detail: str | list[dict[str, object]]) -> JSONResponse:
    # A detail can quote untrusted input (an archive's member names); a backstop so that no
    # error body is ever large, whatever the code that raised forgot to shorten.
    max_detail_chars = 1000
    if isinstance(detail, str) and len(detail) > max_detail_chars:
        detail = detail[:max_detail_chars] + "…"
    return JSONResponse({"error": code, "detail": detail}, status_code=status)


class BearerAuth:
    """401 unless ``Authorization: Bearer <token>`` matches (constant time), before the route
    or any body is touched; 415 for a body that is not JSON where JSON is expected."""

    def __init__(
        self,
        app: ASGIApp,
        token: str,
        open_paths: frozenset[str],
        raw_body_paths: frozenset[str],
    ) -> None:
        self.app = app
        self.token = token.encode()
        self.open_paths = open_paths
        self.raw_body_paths = raw_body_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if not bearer_matches(scope["headers"], self.token):
            if scope["type"] == "websocket":
                # Closing before accept: the server answers the handshake with 403.
                await send({"type": "websocket.close", "code": 1008})
                return
            response = error_response(401, "unauthorized", "missing or wrong bearer token")
            response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        raw = scope["path"] in self.raw_body_paths
        if scope["type"] == "http" and _has_body(headers) and not raw:
            media = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
            if media != b"application/json":
                response = error_response(
                    415, "unsupported_media_type", "the body must be application/json"
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _has_body(headers: dict[bytes, bytes]) -> bool:
    length = headers.get(b"content-length")
    return b"transfer-encoding" in headers or (length is not None and length not in (b"", b"0"))


class BodyLimit:
    """413 for a JSON body over the limit (the code upload has its own, larger limit)."""

    def __init__(self, app: ASGIApp, max_bytes: int, limits: dict[str, int]) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.limits = limits  # path -> its own limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] == "/api/code":
            await self.app(scope, receive, send)
            return
        max_bytes = self.limits.get(scope["path"], self.max_bytes)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > max_bytes:
            too_large = f"body over {max_bytes} bytes"
            response = error_response(413, errors.PayloadTooLarge.code, too_large)
            await response(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > max_bytes:
                raise errors.PayloadTooLarge(f"body over {max_bytes} bytes")
            return message

        await self.app(scope, limited, send)
