"""Typed async client for the runner API (httpx + websockets). Control reaches a runner only
through this, usually over an SSH-forwarded local port.

Errors are translated here: callers see ``RunnerClientError`` subclasses, never httpx's or
websockets'.

    RunnerClientError
    ├── RunnerUnavailable   cannot connect, timed out, or the stream broke beyond retries
    └── RunnerAPIError      the runner answered 4xx/5xx: ``status``, ``error``, ``detail``
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
from pydantic import BaseModel

from tcl.common.tls import shared_context
from tcl.runner.api import (
    CachedCodeRequest,
    Event,
    EventsPage,
    HealthInfo,
    JobSpec,
    Metrics,
    SessionInfo,
    StartRequest,
    StateInfo,
    StopRequest,
    SyncAck,
    SyncPatch,
)

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

M = TypeVar("M", bound=BaseModel)
UPLOAD_CHUNK_BYTES = 1024 * 1024
WS_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


KEEPALIVE_EXPIRY_S = 2.0


class RunnerClientError(Exception):
    pass


class RunnerUnavailable(RunnerClientError):
    pass


class RunnerAPIError(RunnerClientError):
    def __init__(self, status: int, error: str, detail: object) -> None:
        super().__init__(f"runner answered {status} {error}: {detail}")
        self.status = status
        self.error = error
        self.detail = detail


class RunnerClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._auth = {"Authorization": f"Bearer {token}"}
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            transport=transport,
            verify=shared_context(),
            timeout=timeout_s,
            trust_env=False,
            headers=self._auth,
            # Idle connections are dropped well before the server's keep-alive (uvicorn: 5 s)
            # closes them: reusing one the server is closing fails a request with "Server
            # disconnected" (seen under a sweep's steady traffic); a new connection is cheap.
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S),
        )

    async def __aenter__(self) -> RunnerClient:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- calls ---------------------------------------------------------------------------

    async def healthcheck(self) -> HealthInfo:
        return await self._call("GET", "/api/healthcheck", HealthInfo)

    async def wait_healthy(self, timeout_s: float = 30.0, interval_s: float = 0.05) -> HealthInfo:
        """Poll the healthcheck until it answers (the runner is starting)."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            try:
                return await self.healthcheck()
            except RunnerUnavailable:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(interval_s)

    async def submit(self, spec: JobSpec) -> StateInfo:
        # Secrets are excluded from repr, not from the wire: this is where they must go.
        body = spec.model_dump(mode="json")
        return await self._call("POST", "/api/submit", StateInfo, json=body)

    async def upload_code(self, data: bytes | Path, sha256: str) -> StateInfo:
        """PUT the tarball (a file is streamed, never read whole)."""
        content: bytes | AsyncIterator[bytes]
        headers = {"X-Code-Sha256": sha256, "Content-Type": "application/gzip"}
        if isinstance(data, Path):
            content = _file_chunks(data)
            headers["Content-Length"] = str(data.stat().st_size)
        else:
            content = data
        return await self._call("PUT", "/api/code", StateInfo, content=content, headers=headers)

    async def use_cached_code(self, sha256: str) -> StateInfo:
        """Install the code from the host's tree cache; RunnerAPIError 404 when it is absent."""
        body = CachedCodeRequest(sha256=sha256).model_dump()
        return await self._call("POST", "/api/code/cached", StateInfo, json=body)

    async def run(self) -> StateInfo:
        return await self._call("POST", "/api/run", StateInfo)

    async def start(self, spec: JobSpec) -> StateInfo:
        """Submit, the code from the host's cache, run, in one request (``waiting_code``: the
        cache lacks the tree; upload it, then :meth:`run`). A runner older than the route
        answers RunnerAPIError 404."""
        body = StartRequest(spec=spec).model_dump(mode="json")  # secrets included: the wire
        return await self._call("POST", "/api/start", StateInfo, json=body)

    async def stop(self, grace_s: float = 10.0, dump_stacks: bool = False) -> StateInfo:
        body = StopRequest(grace_s=grace_s, dump_stacks=dump_stacks).model_dump()
        return await self._call("POST", "/api/stop", StateInfo, json=body)

    async def metrics(self) -> Metrics:
        return await self._call("GET", "/api/metrics", Metrics)

    async def events(self, after: int = 0, wait_s: float = 0.0, limit: int = 1000) -> EventsPage:
        params = {"after": after, "wait": wait_s, "limit": limit}
        timeout = httpx.Timeout(self._http.timeout.read or 30.0, read=wait_s + 30.0)
        return await self._call("GET", "/api/events", EventsPage, params=params, timeout=timeout)

    async def session(self) -> SessionInfo:
        """The job's interactive session (RunnerAPIError 409: the job is not one)."""
        return await self._call("GET", "/api/session", SessionInfo)

    async def sync(self, patch: SyncPatch) -> SyncAck:
        """Apply a live code change (RunnerAPIError 409 ``sync_conflict`` names the paths)."""
        body = patch.model_dump(mode="json")
        timeout = httpx.Timeout(self._http.timeout.read or 30.0, read=120.0)
        return await self._call("POST", "/api/sync", SyncAck, json=body, timeout=timeout)

    def _ws_base(self) -> str:
        if self.base_url.startswith("http"):
            return "ws" + self.base_url[len("http") :]
        return self.base_url

    async def open_forward(self) -> ClientConnection:
        """A WebSocket carrying one TCP connection to the job's session (``WS /api/forward``);
        the caller closes it. RunnerUnavailable when the runner cannot be reached, or refuses
        (the job is not a session, or not running)."""
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus, WebSocketException

        try:
            return await connect(
                f"{self._ws_base()}/api/forward",
                max_size=WS_MAX_MESSAGE_BYTES,
                open_timeout=10,
                proxy=None,
                additional_headers=self._auth,
                compression=None,  # bytes of a notebook's traffic: not worth the CPU
            )
        except InvalidStatus as e:
            raise RunnerAPIError(e.response.status_code, "forward_refused", str(e)) from e
        except (OSError, WebSocketException, TimeoutError) as e:
            raise RunnerUnavailable(f"forward to {self.base_url}: {e!r}") from e

    async def poll(self, after: int = 0, wait_s: float = 25.0) -> AsyncIterator[Event]:
        """Every event past ``after`` by long polling, until the job has ended."""
        while True:
            page = await self.events(after, wait_s)
            for event in page.events:
                yield event
            after = page.next
            if not page.more and not page.events and page.state.is_final:
                return

    async def follow(
        self, after: int = 0, *, retries: int = 5, backoff_s: float = 0.2
    ) -> AsyncIterator[Event]:
        """Every event past ``after`` over the WebSocket, as it happens, until the job has ended.

        A dropped connection is resumed from the last ``seq`` received (no gap, no duplicate);
        after ``retries`` failed reconnects in a row, ``RunnerUnavailable``.
        """
        from websockets.asyncio.client import connect
        from websockets.exceptions import ConnectionClosedOK, WebSocketException

        ws_base = self._ws_base()
        failures = 0
        while True:
            try:
                async with connect(
                    f"{ws_base}/api/logs?after={after}",
                    max_size=WS_MAX_MESSAGE_BYTES,
                    open_timeout=10,
                    proxy=None,
                    additional_headers=self._auth,
                ) as ws:
                    async for message in ws:
                        event = Event.model_validate_json(message)
                        if event.seq <= after:
                            continue
                        after = event.seq
                        failures = 0
                        yield event
                    return  # closed normally: the job ended and every event was sent
            except ConnectionClosedOK:
                return
            except (OSError, WebSocketException, TimeoutError) as e:
                failures += 1
                if failures > retries:
                    raise RunnerUnavailable(f"log stream from {self.base_url} lost: {e}") from e
                await asyncio.sleep(backoff_s * 2 ** (failures - 1) * (0.5 + random.random()))

    # -- plumbing ------------------------------------------------------------------------

    async def _call(self, method: str, path: str, model: type[M], **kwargs: Any) -> M:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.TransportError as e:
            raise RunnerUnavailable(f"{method} {self.base_url}{path}: {e!r}") from e
        except RuntimeError as e:
            if not self._http.is_closed:
                raise
            # closed by its owner before or while this call was made: a dropped connection
            raise RunnerUnavailable(f"{method} {self.base_url}{path}: the client was closed") from e
        if response.status_code >= 400:
            try:
                body = response.json()
                error, detail = str(body.get("error", "http_error")), body.get("detail", "")
            except ValueError:
                error, detail = "http_error", response.text[:500]
            raise RunnerAPIError(response.status_code, error, detail)
        return model.model_validate_json(response.content)


async def _file_chunks(path: Path) -> AsyncIterator[bytes]:
    with open(path, "rb") as f:
        while chunk := await asyncio.to_thread(f.read, UPLOAD_CHUNK_BYTES):
            yield chunk
