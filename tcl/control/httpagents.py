"""httpx implementations of the agent seams (``ShimApi``, ``RunnerApi``).

They speak the wire schemas in ``tcl.shim.api`` / ``tcl.runner.api`` and translate httpx
errors into ``tcl.control.errors`` at the call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx

from tcl.control.errors import AgentError, AgentUnreachableError, NoCapacityError
from tcl.runner.api import EventsPage, JobSpec, StopRequest
from tcl.shim.api import HostInfo, TaskInfo, TaskSpec, TerminateRequest

_CHUNK = 1 << 20


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

    async def terminate_task(self, task_id: str, message: str = "") -> TaskInfo:
        req = TerminateRequest(message=message)
        resp = await self._request(
            "POST", f"/tasks/{task_id}/terminate", json=req.model_dump(mode="json")
        )
        return TaskInfo.model_validate(resp.json())


class HttpRunner(_Http):
    def __init__(self, base_url: str, name: str = "runner") -> None:
        super().__init__(base_url, name)

    async def healthcheck(self) -> dict[str, Any]:
        return dict((await self._request("GET", "/healthcheck")).json())

    async def submit(self, spec: JobSpec) -> None:
        await self._request("POST", "/submit", json=spec.model_dump(mode="json"))

    async def upload_code(
        self, path: Path, sha256: str, progress: Callable[[int, int], None] | None = None
    ) -> None:
        total = path.stat().st_size

        async def body() -> AsyncIterator[bytes]:
            done = 0
            with open(path, "rb") as f:
                while chunk := f.read(_CHUNK):
                    done += len(chunk)
                    if progress is not None:
                        progress(done, total)
                    yield chunk

        await self._request(
            "PUT", "/code", content=body(),
            headers={"X-Code-Sha256": sha256, "Content-Length": str(total)},
            timeout=600.0,
        )  # fmt: skip

    async def run(self) -> None:
        await self._request("POST", "/run")

    async def events(self, after: int, wait_s: float = 0.0, limit: int = 1000) -> EventsPage:
        resp = await self._request(
            "GET", "/events", params={"after": after, "wait": wait_s, "limit": limit},
            timeout=wait_s + 30.0,
        )  # fmt: skip
        return EventsPage.model_validate(resp.json())

    async def stop(self, grace_s: float = 10.0) -> None:
        await self._request("POST", "/stop", json=StopRequest(grace_s=grace_s).model_dump())
