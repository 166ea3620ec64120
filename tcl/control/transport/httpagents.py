"""The agents' own typed clients behind control's seams (``ShimApi``, ``RunnerApi``).

Their exception trees (``tcl.shim.errors``, ``tcl.runner.client``) are translated into
``tcl.control.errors`` at each call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tcl.control.errors import (
    AgentError,
    AgentUnreachableError,
    NoCapacityError,
    SyncConflictError,
    TaskNotFoundError,
)
from tcl.control.transport.agents import ForwardStream
from tcl.runner.api import EventsPage, JobSpec, RunnerState, SessionInfo, SyncAck, SyncPatch
from tcl.runner.client import RunnerAPIError, RunnerClient, RunnerUnavailable
from tcl.shim.api import HostInfo, TaskInfo, TaskSpec, TerminationReason
from tcl.shim.client import ShimClient
from tcl.shim.errors import NoCapacity, NotFound, ShimError, ShimUnavailable, Unauthorized

if TYPE_CHECKING:
    from websockets.asyncio.client import ClientConnection

T = TypeVar("T")


class HttpShim:
    """The shim's own typed client (``tcl.shim.client``) behind the ``ShimApi`` seam."""

    def __init__(
        self,
        base_url: str,
        token: str,
        name: str = "shim",
        unreachable_hint: str = "",
        on_unauthorized: Callable[[], None] | None = None,
        uds: Path | None = None,
    ) -> None:
        self.name = name
        self.unreachable_hint = unreachable_hint  # appended when the shim does not answer
        # a token that no longer matches (the host was set up again): the owner forgets it
        self.on_unauthorized = on_unauthorized
        self._client = ShimClient(base_url, token, uds=uds)

    async def _call(self, coro: Awaitable[T]) -> T:
        try:
            return await coro
        except ShimUnavailable as e:
            detail = str(e).rstrip(": ")
            hint = f"; {self.unreachable_hint}" if self.unreachable_hint else ""
            raise AgentUnreachableError(f"{self.name}: {detail}{hint}") from None
        except NoCapacity as e:
            raise NoCapacityError(f"{self.name}: {e}") from None
        except NotFound as e:
            raise TaskNotFoundError(f"{self.name}: {e}") from None
        except Unauthorized as e:
            if self.on_unauthorized is not None:
                # The shim made a new token when it restarted (``--new-token``): the owner reads
                # the file again, and the call is worth another try, not a failure.
                self.on_unauthorized()
                raise AgentUnreachableError(
                    f"{self.name}: its token changed (the shim restarted); reading it again"
                ) from None
            raise AgentError(f"{self.name}: {e}") from None
        except ShimError as e:
            raise AgentError(f"{self.name}: {e}") from None

    async def healthcheck(self) -> dict[str, Any]:
        return (await self._call(self._client.healthcheck())).model_dump(mode="json")

    async def host(self) -> HostInfo:
        return await self._call(self._client.host())

    async def create_task(self, spec: TaskSpec) -> TaskInfo:
        return await self._call(self._client.submit_task(spec))

    async def get_task(self, task_id: str) -> TaskInfo:
        return await self._call(self._client.get_task(task_id))

    async def wait_task_started(self, task_id: str, wait_s: float) -> TaskInfo:
        return await self._call(self._client.wait_task_started(task_id, wait_s))

    async def list_tasks(self) -> list[TaskInfo]:
        return await self._call(self._client.list_tasks())

    async def terminate_task(
        self,
        task_id: str,
        reason: TerminationReason = TerminationReason.STOPPED_BY_USER,
        message: str = "",
    ) -> TaskInfo:
        return await self._call(self._client.terminate_task(task_id, reason, message))

    async def remove_task(self, task_id: str) -> None:
        await self._call(self._client.remove_task(task_id))

    async def aclose(self) -> None:
        await self._client.aclose()

    async def retire(self) -> None:
        await self._client.retire()


class HttpRunner:
    """The runner's own typed client (``tcl.runner.client``) behind the ``RunnerApi`` seam."""

    def __init__(self, base_url: str, token: str, name: str = "runner") -> None:
        self.name = name
        self._client = RunnerClient(base_url, token)

    async def _call(self, coro: Awaitable[T]) -> T:
        try:
            return await coro
        except RunnerUnavailable as e:
            raise AgentUnreachableError(f"{self.name}: {e}") from None
        except RunnerAPIError as e:
            if e.status == 401:
                # The token came from the shim just now: whatever answers at this port is not
                # this task's runner (it ended and the port went to another task's, or it
                # never bound it). Not there, as far as this task goes: look again.
                raise AgentUnreachableError(
                    f"{self.name}: another runner answers at its port ({e.detail})"
                ) from None
            raise AgentError(f"{self.name}: {e.error}: {e.detail}") from None

    async def healthcheck(self) -> dict[str, Any]:
        return (await self._call(self._client.healthcheck())).model_dump(mode="json")

    async def submit(self, spec: JobSpec) -> None:
        await self._call(self._client.submit(spec))

    async def upload_code(
        self,
        path: Path,
        sha256: str,
        progress: Callable[[int, int], None] | None = None,
        *,
        ask_cache: bool = True,
    ) -> None:
        if not (ask_cache and await self.use_cached_code(sha256)):
            await self._call(self._client.upload_code(path, sha256))
        if progress is not None:
            size = path.stat().st_size
            progress(size, size)

    async def use_cached_code(self, sha256: str) -> bool:
        """Have the runner take the tree from its host's code cache (no upload, no extraction);
        False when the cache lacks it (404) or the runner predates the cache (405)."""
        try:
            await self._client.use_cached_code(sha256)
            return True
        except RunnerAPIError as e:
            if e.status in (404, 405):
                return False
            raise AgentError(f"{self.name}: {e.error}: {e.detail}") from None
        except RunnerUnavailable as e:
            raise AgentUnreachableError(f"{self.name}: {e}") from None

    async def run(self) -> None:
        await self._call(self._client.run())

    async def start(self, spec: JobSpec) -> RunnerState | None:
        try:
            return (await self._client.start(spec)).state
        except RunnerAPIError as e:
            if e.status in (404, 405):  # a runner older than the route
                return None
            raise AgentError(f"{self.name}: {e.error}: {e.detail}") from None
        except RunnerUnavailable as e:
            raise AgentUnreachableError(f"{self.name}: {e}") from None

    async def events(self, after: int, wait_s: float = 0.0, limit: int = 1000) -> EventsPage:
        return await self._call(self._client.events(after, wait_s, limit))

    async def stop(self, grace_s: float = 10.0, dump_stacks: bool = False) -> None:
        await self._call(self._client.stop(grace_s, dump_stacks))

    async def session(self) -> SessionInfo:
        return await self._call(self._client.session())

    async def sync(self, patch: SyncPatch) -> SyncAck:
        try:
            return await self._client.sync(patch)
        except RunnerAPIError as e:
            if e.error == "sync_conflict":
                raise SyncConflictError(f"{self.name}: {e.detail}") from None
            raise AgentError(f"{self.name}: {e.error}: {e.detail}") from None
        except RunnerUnavailable as e:
            raise AgentUnreachableError(f"{self.name}: {e}") from None

    async def open_forward(self) -> ForwardStream:
        ws = await self._call(self._client.open_forward())
        return _WsStream(ws)

    async def aclose(self) -> None:
        await self._client.aclose()


class _WsStream:
    """A ``ForwardStream`` over the runner's ``WS /api/forward`` (websockets' errors stay here:
    a broken stream reads as closed)."""

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws

    async def send(self, data: bytes) -> None:
        from websockets.exceptions import WebSocketException

        try:
            await self._ws.send(data)
        except (OSError, WebSocketException) as e:
            raise AgentUnreachableError(f"forward: {e}") from None

    async def recv(self) -> bytes:
        from websockets.exceptions import WebSocketException

        try:
            message = await self._ws.recv()
        except (OSError, WebSocketException):
            return b""
        return message if isinstance(message, bytes) else message.encode()

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self._ws.close()
