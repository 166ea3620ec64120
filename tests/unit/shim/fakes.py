"""An in-memory executor for unit tests of the service and the HTTP API.

Docker and real runner processes are exercised by tests/integration/shim; here the executor seam
is replaced (like dstack's DummyRunner) so that API behaviour can be tested without services.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path

from tcl.shim.api import ExecutorKind, Ports
from tcl.shim.clusterfs import ClusterMounts
from tcl.shim.errors import ImageError
from tcl.shim.executors.base import Launch, Liveness, Observed, ProgressFn, Started
from tcl.shim.inventory import discover
from tcl.shim.service import TaskService
from tcl.shim.store import Handle, TaskStore


class FakeExecutor:
    kind = ExecutorKind.DOCKER

    def __init__(self) -> None:
        self.alive: dict[str, int] = {}  # task id -> runner port
        self.exit_codes: dict[str, int] = {}
        self.launches: dict[str, Launch] = {}
        self.start_delay_s = 0.0
        self.stops: list[str] = []
        self._next_port = 20000

    async def prepare(self, launch: Launch, progress: ProgressFn) -> None:
        if launch.spec.image.startswith("missing/"):
            raise ImageError(f"image {launch.spec.image} not found")
        if launch.spec.image.startswith("pull/"):
            for p in (0.0, 0.5, 1.0):
                progress(p)

    async def start(self, launch: Launch) -> Started:
        await asyncio.sleep(self.start_delay_s)
        self._next_port += 1
        self.alive[launch.spec.id] = self._next_port
        self.launches[launch.spec.id] = launch
        return Started(Handle(container_id=f"c-{launch.spec.id}"), Ports(runner=self._next_port))

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def observe(self, tasks: dict[str, Handle]) -> dict[str, Observed]:
        out = {}
        for t in tasks:
            if t in self.alive:
                out[t] = Observed(Liveness.ALIVE, ports=Ports(runner=self.alive[t]))
            elif t in self.exit_codes:
                out[t] = Observed(Liveness.EXITED, exit_code=self.exit_codes[t])
            else:
                out[t] = Observed(Liveness.MISSING)
        return out

    def exit(self, task_id: str, code: int) -> None:
        self.alive.pop(task_id)
        self.exit_codes[task_id] = code

    async def stop(self, task_id: str, handle: Handle, timeout_s: float) -> int | None:
        self.stops.append(task_id)
        if task_id in self.alive:
            self.exit(task_id, 143)
        return self.exit_codes.get(task_id)

    async def end_job_leftovers(self, task_id: str, handle: Handle) -> int:
        return 0  # an in-memory workload starts no daemons

    async def remove(self, task_id: str, handle: Handle) -> None:
        self.alive.pop(task_id, None)
        self.exit_codes.pop(task_id, None)

    async def orphans(self, known: Iterable[str]) -> list[str]:
        known_ids = set(known)
        return [t for t in list(self.alive) + list(self.exit_codes) if t not in known_ids]

    async def remove_orphan(self, name: str) -> None:
        await self.remove(name, Handle())


def fake_service(
    state_dir: Path, ex: FakeExecutor, accelerators: str | None = "h100:4"
) -> TaskService:
    """A task service over ``ex`` (its only executor) with fake accelerators."""
    return TaskService(
        store=TaskStore(state_dir),
        inventory=discover(accelerators),
        executors={ex.kind: ex},
        default_executor=ex.kind,
        mounts=ClusterMounts(state_dir),
    )
