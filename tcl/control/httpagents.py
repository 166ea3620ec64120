"""httpx implementations of the agent seams (``ShimApi``, ``RunnerApi``).

They speak the wire schemas in ``tcl.shim.api`` / ``tcl.runner.api`` and translate httpx
errors into ``tcl.control.errors`` at the call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tcl.control.errors import AgentError, AgentUnreachableError, NoCapacityError
from tcl.runner.api import EventsPage, JobSpec
from tcl.runner.client import RunnerAPIError, RunnerClient, RunnerUnavailable
from tcl.shim.api import HostInfo, TaskInfo, TaskSpec, TerminateRequest, TerminationReason

T = TypeVar("T")


def _raise_for(resp: httpx.Response, what: str) -> None:
    if resp.status_code < 400:
        return
    try:
        body: Any = resp.json()
        code, detail = str(body.get("error", resp.status_code)), body.get("detail", "")
    except ValueError:
        code, detail = str(resp.status_code), resp.text[:200]
    if code == "no_capacity":
        raise NoCapacityError(f"{what}: no capacity: {detail}")
    raise AgentError(f"{what}: {code}: {detail}")


class _Http:
    def __init__(self, base_url: str, name: str, headers: dict[str, str] | None = None) -> None:
        self.name = name
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/api", headers=headers or {}, timeout=30.0
        )

    async def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            resp = await self._client.request(method, path, **kw)
        except httpx.TransportError as e:
            raise AgentUnreachableError(f"{self.name}: {type(e).__name__}: {e}") from None
        _raise_for(resp, self.name)
        return resp

    async def aclose(self) -> None:
        await self._client.aclose()


class HttpShim(_Http):
    def __init__(self, base_url: str, token: str, name: str = "shim") -> None:
        super().__init__(base_url, name, {"Authorization": f"Bearer {token}"})

    async def healthcheck(self) -> dict[str, Any]:
        return dict((await self._request("GET", "/healthcheck")).json())

    async def host(self) -> HostInfo:
        return HostInfo.model_validate((await self._request("GET", "/host")).json())

    async def create_task(self, spec: TaskSpec) -> TaskInfo:
        resp = await self._request("POST", "/tasks", json=spec.model_dump(mode="json"))
        return TaskInfo.model_validate(resp.json())

    async def get_task(self, task_id: str) -> TaskInfo:
        return TaskInfo.model_validate((await self._request("GET", f"/tasks/{task_id}")).json())

    async def terminate_task(
        self,
        task_id: str,
        reason: TerminationReason = TerminationReason.STOPPED_BY_USER,
        message: str = "",
    ) -> TaskInfo:
        req = TerminateRequest(reason=reason, message=message)
        resp = await self._request(
            "POST", f"/tasks/{task_id}/terminate", json=req.model_dump(mode="json")
        )
        return TaskInfo.model_validate(resp.json())


class HttpRunner:
    """The runner's own typed client (``tcl.runner.client``) behind the ``RunnerApi`` seam."""

    def __init__(self, base_url: str, name: str = "runner") -> None:
        self.name = name
        self._client = RunnerClient(base_url)

    async def _call(self, coro: Awaitable[T]) -> T:
        try:
            return await coro
        except RunnerUnavailable as e:
            raise AgentUnreachableError(f"{self.name}: {e}") from None
        except RunnerAPIError as e:
            raise AgentError(f"{self.name}: {e.error}: {e.detail}") from None

    async def healthcheck(self) -> dict[str, Any]:
        return (await self._call(self._client.healthcheck())).model_dump(mode="json")

    async def submit(self, spec: JobSpec) -> None:
        await self._call(self._client.submit(spec))

    async def upload_code(
        self, path: Path, sha256: str, progress: Callable[[int, int], None] | None = None
    ) -> None:
        await self._call(self._client.upload_code(path, sha256))
        if progress is not None:
            size = path.stat().st_size
            progress(size, size)

    async def run(self) -> None:
        await self._call(self._client.run())

    async def events(self, after: int, wait_s: float = 0.0, limit: int = 1000) -> EventsPage:
        return await self._call(self._client.events(after, wait_s, limit))

    async def stop(self, grace_s: float = 10.0) -> None:
        await self._call(self._client.stop(grace_s))

    async def aclose(self) -> None:
        await self._client.aclose()
