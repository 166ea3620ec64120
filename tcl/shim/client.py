"""Typed async client for the shim API. httpx errors become the shim's own exception tree.

    async with ShimClient("http://127.0.0.1:10998", token) as shim:
        info = await shim.submit_task(TaskSpec(id="t1", image="img", accelerators=2))

``transport`` is the test seam (``httpx.ASGITransport(app)``, ``httpx.MockTransport``).
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from tcl.common.tls import shared_context
from tcl.shim.api import (
    MAX_START_WAIT_S,
    HealthInfo,
    HostInfo,
    PreemptionNotice,
    TaskInfo,
    TaskSpec,
    TerminateRequest,
    TerminationReason,
)
from tcl.shim.errors import (
    BY_CODE,
    BadRequest,
    Conflict,
    NoCapacity,
    NotFound,
    ProtocolError,
    ShimError,
    ShimUnavailable,
    Unauthorized,
)

M = TypeVar("M", bound=BaseModel)
_TASKS = TypeAdapter(list[TaskInfo])
_BY_STATUS: dict[int, type[ShimError]] = {
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    422: BadRequest,
}


KEEPALIVE_EXPIRY_S = 2.0


class ShimClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_s: float = 30.0,
        uds: Path | None = None,
    ) -> None:
        if uds is not None and transport is None:  # the local default's shim (tcl.localsock)
            limits = httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S)
            transport = httpx.AsyncHTTPTransport(
                uds=str(uds), limits=limits, verify=shared_context()
            )
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            transport=transport,
            verify=shared_context(),
            timeout=timeout_s,
            headers={"Authorization": f"Bearer {token}"},
            # Idle connections are dropped well before the server's keep-alive (uvicorn: 5 s)
            # closes them: reusing one the server is closing fails a request with "Server
            # disconnected" (seen under a sweep's steady traffic); a new connection is cheap.
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S),
        )
        self._in_flight = 0
        self._retired = False

    async def __aenter__(self) -> ShimClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def retire(self) -> None:
        """Close once no call is in flight: its owner made a new client for what comes next
        (a reset after one caller's dropped connection must not fail another's call)."""
        self._retired = True
        if self._in_flight == 0:
            await self.aclose()

    # -- endpoints ----------------------------------------------------------------------------
    async def healthcheck(self) -> HealthInfo:
        return _parse(HealthInfo, await self._call("GET", "/api/healthcheck"))

    async def host(self) -> HostInfo:
        return _parse(HostInfo, await self._call("GET", "/api/host"))

    async def submit_task(self, spec: TaskSpec) -> TaskInfo:
        body = spec.model_dump(mode="json")
        return _parse(TaskInfo, await self._call("POST", "/api/tasks", json=body))

    async def list_tasks(self) -> list[TaskInfo]:
        resp = await self._call("GET", "/api/tasks")
        try:
            return _TASKS.validate_json(resp.content)
        except ValidationError as e:
            raise ProtocolError(f"unexpected task list from the shim: {e}") from e

    async def get_task(self, task_id: str) -> TaskInfo:
        return _parse(TaskInfo, await self._call("GET", f"/api/tasks/{task_id}"))

    async def wait_task_started(self, task_id: str, wait_s: float) -> TaskInfo:
        """The task once it runs or ended, or after ``wait_s`` (capped at the shim's bound)."""
        wait_s = min(max(wait_s, 0.0), MAX_START_WAIT_S)
        resp = await self._call(
            "GET",
            f"/api/tasks/{task_id}",
            params={"wait_s": wait_s},
            timeout=wait_s + (self._http.timeout.read or 30.0),
        )
        return _parse(TaskInfo, resp)

    async def terminate_task(
        self,
        task_id: str,
        reason: TerminationReason = TerminationReason.STOPPED_BY_USER,
        message: str = "",
        timeout_s: float = 10.0,
    ) -> TaskInfo:
        req = TerminateRequest(reason=reason, message=message, timeout_s=timeout_s)
        resp = await self._call(
            "POST",
            f"/api/tasks/{task_id}/terminate",
            json=req.model_dump(mode="json"),
            timeout=timeout_s + (self._http.timeout.read or 30.0),
        )
        return _parse(TaskInfo, resp)

    async def preempt(self, notice: PreemptionNotice | None = None) -> list[TaskInfo]:
        """Tell the shim its host is going away; returns the tasks it is terminating."""
        body = (notice or PreemptionNotice()).model_dump(mode="json")
        resp = await self._call("POST", "/api/preemption", json=body)
        try:
            return _TASKS.validate_json(resp.content)
        except ValidationError as e:
            raise ProtocolError(f"unexpected task list from the shim: {e}") from e

    async def remove_task(self, task_id: str) -> None:
        await self._call("DELETE", f"/api/tasks/{task_id}")

    # -- plumbing -----------------------------------------------------------------------------
    async def _call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        self._in_flight += 1
        try:
            return await self._request(method, path, **kwargs)
        finally:
            self._in_flight -= 1
            if self._retired and self._in_flight == 0:
                await self.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            resp = await self._http.request(method, path, **kwargs)
        except httpx.TransportError as e:
            raise ShimUnavailable(
                f"cannot reach the shim at {self._http.base_url}: {type(e).__name__}: {e}"
            ) from e
        except RuntimeError as e:
            if not self._http.is_closed:
                raise
            # closed by its owner (a reset after another call's error) before or while this
            # call was made: a dropped connection, worth asking again on a new client
            raise ShimUnavailable(
                f"the connection to the shim at {self._http.base_url} was reset meanwhile"
            ) from e
        if resp.is_success:
            return resp
        raise _error_from(resp)


def _error_from(resp: httpx.Response) -> ShimError:
    try:
        body = resp.json()
        code, detail = str(body["error"]), body["detail"]
    except (ValueError, KeyError, TypeError):
        return ProtocolError(f"shim answered HTTP {resp.status_code}: {resp.text[:200]}")
    text = (
        detail
        if isinstance(detail, str)
        else "; ".join(
            f"{d.get('field') or d.get('loc')}: {d.get('msg')}"
            for d in detail
            if isinstance(d, dict)
        )
    )
    if code == NoCapacity.code:
        return NoCapacity(text, free=list(body.get("free") or []))
    cls = BY_CODE.get(code) or _BY_STATUS.get(resp.status_code, ShimError)
    return cls(text)


def _parse(model: type[M], resp: httpx.Response) -> M:
    try:
        return model.model_validate_json(resp.content)
    except ValidationError as e:
        raise ProtocolError(f"unexpected answer from the shim: {e}") from e
