"""Who may talk to ``tcl ui``: loopback names only, and the token, before any route runs.

- The Host header must name loopback (``127.0.0.1`` or ``localhost``, any port): a page on
  another site whose name an attacker re-pointed at 127.0.0.1 (DNS rebinding) sends its own
  name, and is refused (421 for HTTP, the socket closed for a WebSocket).
- A browser's WebSocket or POST that says where it comes from (``Origin``) must come from a
  loopback page too.
- Then the token: ``Authorization: Bearer <token>``, or the cookie that the first page load
  (``/?token=...``) sets (HttpOnly, SameSite=Strict, so other sites' pages never send it).
  Compared with :func:`hmac.compare_digest`. Every path is guarded, the static files included:
  one rule with no exemptions to get wrong (the page's own loads carry the cookie).
"""

from __future__ import annotations

import hmac
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlsplit

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from tcl.tokenfile import bearer_matches

LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost"})
TOKEN_QUERY = "token"  # only on the page itself: /?token=...


def cookie_name(port: int | None) -> str:
    """Cookies are shared by every port of a host: one name per port, so two ``tcl ui`` on
    one machine do not overwrite each other's."""
    return f"tcl_ui_{port}" if port else "tcl_ui"


def _hostname(value: str) -> str:
    """``127.0.0.1:8080`` → ``127.0.0.1``; ``[::1]:80`` → ``::1``; lower case."""
    try:
        return (urlsplit(f"//{value}").hostname or "").lower()
    except ValueError:
        return ""


def loopback_host(value: str) -> bool:
    return _hostname(value) in LOOPBACK_NAMES


def _header(scope: Scope, name: bytes) -> str | None:
    values = [v for k, v in scope["headers"] if k == name]
    return values[0].decode("latin-1") if len(values) == 1 else None


def _cookie_token(scope: Scope, name: str) -> str | None:
    raw = _header(scope, b"cookie")
    if raw is None:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw)
    except Exception:  # a malformed Cookie header is no token
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None else None


def query_token(scope: Scope) -> str | None:
    """The token of ``/?token=...`` (the URL ``tcl ui`` prints), on the page's path only."""
    if scope["path"] != "/":
        return None
    values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get(TOKEN_QUERY)
    return values[0] if values and len(values) == 1 else None


def _same(given: str | None, token: bytes) -> bool:
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"), token)


class Guard:
    """ASGI middleware: refuses before the app sees anything it should not."""

    def __init__(self, app: ASGIApp, token: str, port: int | None) -> None:
        self.app = app
        self.token = token.encode()
        self.cookie = cookie_name(port)

    def allowed(self, scope: Scope) -> tuple[int, str] | None:
        """None when the request may go on, else (status, why)."""
        host = _header(scope, b"host")
        if host is None or not loopback_host(host):
            return 421, "tcl ui answers only to 127.0.0.1 or localhost (Host header refused)"
        origin = _header(scope, b"origin")
        checked = scope["type"] == "websocket" or scope.get("method") == "POST"
        if checked and origin is not None and not loopback_host(urlsplit(origin).netloc):
            return 403, "requests from other sites are refused (Origin header)"
        authed = (
            bearer_matches(scope["headers"], self.token)
            or _same(_cookie_token(scope, self.cookie), self.token)
            or _same(query_token(scope), self.token)
        )
        if not authed:
            return 401, "missing or wrong token: open the URL `tcl ui` printed"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        refused = self.allowed(scope)
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, why = refused
        if scope["type"] == "websocket":
            # closing before accepting answers the handshake with 403
            await send({"type": "websocket.close", "code": 1008, "reason": why[:120]})
            return
        body = {"error": "forbidden" if status != 401 else "unauthorized", "detail": why}
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {}
        await JSONResponse(body, status_code=status, headers=headers)(scope, receive, send)
