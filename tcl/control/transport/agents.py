"""The seams between control and the two agents (shim, runner).

Control only talks to agents through these two protocols, so the solver and the backends can
be tested against fakes at exactly this seam, and the agents' own typed clients
(``tcl.shim.client``, ``tcl.runner.client``) plug in behind them. httpx errors are translated
into ``AgentError`` / ``NoCapacityError`` where the clients are called.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from tcl.runner.api import EventsPage, JobSpec, RunnerState, SessionInfo, SyncAck, SyncPatch
from tcl.shim.api import HostInfo, TaskInfo, TaskSpec, TerminationReason


class ShimApi(Protocol):
    """What control needs from a shim."""

    async def healthcheck(self) -> dict[str, Any]:
        """The shim's health report (``tcl.shim.api.HealthInfo`` as JSON: its mounts...)."""
        ...

    async def host(self) -> HostInfo: ...

    async def create_task(self, spec: TaskSpec) -> TaskInfo:
        """Raises ``NoCapacityError`` on the shim's 409 no_capacity."""
        ...

    async def get_task(self, task_id: str) -> TaskInfo: ...

    async def wait_task_started(self, task_id: str, wait_s: float) -> TaskInfo:
        """The task once it runs or ended, or after ``wait_s`` (at most the shim's
        ``MAX_START_WAIT_S``) with where it stands."""
        ...

    async def list_tasks(self) -> list[TaskInfo]: ...

    async def terminate_task(
        self,
        task_id: str,
        reason: TerminationReason = TerminationReason.STOPPED_BY_USER,
        message: str = "",
    ) -> TaskInfo: ...

    async def remove_task(self, task_id: str) -> None:
        """Remove a terminated task: its runner, container and files on the host."""
        ...

    async def aclose(self) -> None: ...

    async def retire(self) -> None:
        """Close once no call is in flight (its owner made a new client meanwhile)."""
        ...


class ForwardStream(Protocol):
    """One TCP connection to a job's interactive session, carried by the runner's API."""

    async def send(self, data: bytes) -> None: ...

    async def recv(self) -> bytes:
        """The next bytes from the session; ``b""`` once it closed."""
        ...

    async def aclose(self) -> None: ...


class RunnerApi(Protocol):
    """What control needs from a runner."""

    async def healthcheck(self) -> dict[str, Any]: ...

    async def submit(self, spec: JobSpec) -> None: ...

    async def upload_code(
        self,
        path: Path,
        sha256: str,
        progress: Callable[[int, int], None] | None = None,
        *,
        ask_cache: bool = True,
    ) -> None:
        """Get the tarball to the runner: from the host's code cache when it has it (unless
        ``ask_cache`` is False: it was asked already), else uploaded."""
        ...

    async def use_cached_code(self, sha256: str) -> bool:
        """Have the runner take the tree from its host's code cache; False if it lacks it."""
        ...

    async def run(self) -> None: ...

    async def start(self, spec: JobSpec) -> RunnerState | None:
        """Submit, the tree from the host's code cache, run: one request. Its state after
        (``waiting_code``: the cache lacks the tree; ship it, then :meth:`run`); None from a
        runner older than this request (then submit, ship, run)."""
        ...

    async def events(self, after: int, wait_s: float = 0.0, limit: int = 1000) -> EventsPage: ...

    async def stop(self, grace_s: float = 10.0, dump_stacks: bool = False) -> None: ...

    async def session(self) -> SessionInfo: ...

    async def sync(self, patch: SyncPatch) -> SyncAck:
        """Apply a code change; ``SyncConflictError`` names the paths changed under it."""
        ...

    async def open_forward(self) -> ForwardStream: ...

    async def aclose(self) -> None: ...
