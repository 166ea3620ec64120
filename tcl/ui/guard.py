"""Who may talk to ``tcl ui``: loopback names only, the page's own origin for anything that
changes state or streams logs, and the token, before any route runs.

- The Host header must name loopback (``127.0.0.1`` or ``localhost``, any port): a page on
  another site whose name an attacker re-pointed at 127.0.0.1 (DNS rebinding) sends its own
  name, and is refused (421 for HTTP, the socket closed for a WebSocket).
- Other pages on loopback are not to be trusted: another user's server, a dev server, the
  Jupyter that ``tcl repl`` forwards (whose content a job controls) all live on 127.0.0.1,
  on other ports, and SameSite ignores ports, so their requests carry the token cookie. Hence:

  - a WebSocket, and every request whose method is not GET, HEAD or OPTIONS, must carry an
    ``Origin`` equal to the UI's own origin: ``http://`` plus the Host it was sent to (the
    browser sets both; they are equal only when the page is the UI itself);
  - such a request (not the WebSocket: a browser cannot add headers to one) must also carry
    ``X-Tcl-UI``: a cross-origin page cannot add a header without a CORS preflight, which
    this server never grants. The page (``static/app.js``) sends it on every fetch;
  - what a browser marks as sent by another origin's page (``Sec-Fetch-Site: same-site`` or
    ``cross-site``) is refused unless it is a navigation (a link to the dashboard still opens).

- Then the token: ``Authorization: Bearer <token>``, or the cookie that the first page load
  (``/?token=...``) sets (HttpOnly, SameSite=Strict: other sites' pages never send it, but
  pages on other loopback ports do, hence the rules above).
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
ACTION_HEADER = "X-Tcl-UI"  # on the page's own requests; another origin cannot add it
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_OTHER_SITE = frozenset({"same-site", "cross-site"})  # Sec-Fetch-Site of another origin


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


def _origin(value: str) -> tuple[str, str, int] | None:
    """``http://127.0.0.1:8765`` → ``("http", "127.0.0.1", 8765)``; None for anything that is
    not a plain scheme://host[:port] (``null``, a path, a bad port)."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    if parts.path or parts.query or parts.fragment or parts.username or parts.password:
        return None
    return scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80)


def own_origin(origin: str | None, host: str) -> bool:
    """Whether a request's ``Origin`` is the page of the UI reached at ``host`` (the request's
    Host header): same scheme (this server speaks http), host name and port."""
    own = _origin(f"http://{host}")
    return own is not None and origin is not None and _origin(origin) == own


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
        refused = self.cross_origin(scope, host)
        if refused is not None:
            return 403, refused
        authed = (
            bearer_matches(scope["headers"], self.token)
            or _same(_cookie_token(scope, self.cookie), self.token)
            or _same(query_token(scope), self.token)
        )
        if not authed:
            return 401, "missing or wrong token: open the URL `tcl ui` printed"
        return None

    @staticmethod
    def cross_origin(scope: Scope, host: str) -> str | None:
        """Why a request may come from another origin's page (None: it cannot)."""
        websocket = scope["type"] == "websocket"
        changes = websocket or scope.get("method", "GET").upper() not in SAFE_METHODS
        if changes and not own_origin(_header(scope, b"origin"), host):
            # (the Host is not echoed: a WebSocket's close reason holds 123 bytes at most)
            return "only the dashboard's own page may do this: other origins are refused (Origin)"
        if changes and not websocket and not _header(scope, ACTION_HEADER.lower().encode()):
            return f"the {ACTION_HEADER} header is missing (the dashboard's page sends it)"
        site = _header(scope, b"sec-fetch-site")
        if site in _OTHER_SITE and _header(scope, b"sec-fetch-mode") != "navigate":
            return "requests from another origin's page are refused (Sec-Fetch-Site)"
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
