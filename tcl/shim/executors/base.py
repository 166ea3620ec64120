"""The executor interface: the only thing the task service knows about how a runner is run.

Contract (every method may be called again after a shim restart, with the persisted handle):
- ``prepare`` makes the workload startable (pull the image); it reports progress in 0..1.
- ``start`` starts it and returns the handle and host ports; it must leave something findable
  (a labelled container, a recorded pid) before it returns, so ``observe`` can adopt it.
- ``observe`` is non-blocking and batched: one call reports every task it is asked about.
- ``stop`` is safe to call more than once and on a workload that already exited.
- ``remove`` deletes what ``start`` created; safe when nothing exists.
- ``orphans`` lists workloads carrying this shim's marks whose task id is not in ``known``.
- ``end_job_leftovers`` is called once the job has ended while its runner still serves the logs:
  it ends whatever the job left running (daemons), sparing the runner; returns how many.
- ``open`` starts what makes later starts faster (the process executor's fork server);
  ``close`` ends it (never a task's workload).
- ``stop``, ``remove`` and an ``observe`` that finds the runner gone end every process of the
  task, the job's own session and daemons included, before they return.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tcl.shim.api import Accelerator, ExecutorKind, NetworkMode, Ports, TaskSpec
from tcl.shim.store import Handle

ProgressFn = Callable[[float], None]
RUNNER_TOKEN_FILE = "runner-token"


@dataclass(frozen=True)
class Launch:
    """Everything an executor needs to start one task."""

    spec: TaskSpec
    accelerators: list[Accelerator]
    network: NetworkMode
    task_dir: Path
    host_vendor: str | None = None  # vendor of the host's accelerators (None: it has none)
    host_accelerators: int = 0  # how many the host has (a task may hold a subset)

    @property
    def runner_token_file(self) -> Path:
        """The 0600 file holding the runner's bearer token (written by the service)."""
        return self.task_dir / RUNNER_TOKEN_FILE


# libtpu's bounds for one process on part of a host, by chip count: the chips a process holds
# as an x,y,z box. 1 and 2 chips fit every generation's host (2x2 for v4/v5p, 2x4 for v5e/v6e);
# 4 is a 2x2 half of an 8-chip host. Other counts get TPU_VISIBLE_CHIPS only.
_TPU_CHIP_BOUNDS = {1: "1,1,1", 2: "1,2,1", 4: "2,2,1"}
TPU_PROCESS_BASE_PORT = 8476  # libtpu's default process port


def accelerator_env(launch: Launch, renumbered: bool = False) -> dict[str, str]:
    """How the task learns its accelerators: ``CUDA_VISIBLE_DEVICES`` for GPUs (and fakes, which
    stand in for GPUs), ``TPU_VISIBLE_CHIPS`` for TPU chips (and fakes named ``tpu*``),
    ``TCL_ACCELERATORS`` always (host indices). ``renumbered``: the container sees only its own
    devices, numbered from 0."""
    indices = [a.index for a in launch.accelerators]
    host_ids = ",".join(str(i) for i in indices)
    local_ids = ",".join(str(i) for i in range(len(indices))) if renumbered else host_ids
    env = {"TCL_ACCELERATORS": host_ids}
    fake_tpu = bool(indices) and all(a.chip.startswith("tpu") for a in launch.accelerators)
    if launch.host_vendor == "tpu" or (launch.host_vendor == "fake" and fake_tpu):
        env["TPU_VISIBLE_CHIPS"] = local_ids
        if 0 < len(indices) < launch.host_accelerators:
            env.update(_tpu_subset_env(indices))
    elif launch.host_vendor in ("nvidia", "fake"):
        env["CUDA_VISIBLE_DEVICES"] = local_ids
    return env


def _tpu_subset_env(indices: list[int]) -> dict[str, str]:
    """A task on part of a TPU host runs as a one-process slice of its own chips; without this
    libtpu assumes the whole host's topology and fails to open the chips it cannot see. Each
    such task gets its own process port (by its first chip), so two tasks on one host do not
    both bind libtpu's default."""
    bounds = _TPU_CHIP_BOUNDS.get(len(indices))
    if bounds is None:
        return {}
    port = str(TPU_PROCESS_BASE_PORT + min(indices))
    return {
        "TPU_CHIPS_PER_PROCESS_BOUNDS": bounds,
        "TPU_PROCESS_BOUNDS": "1,1,1",
        "TPU_PROCESS_PORT": port,
        "TPU_PROCESS_ADDRESSES": f"localhost:{port}",
    }


class Liveness(enum.Enum):
    ALIVE = "alive"
    EXITED = "exited"
    MISSING = "missing"


@dataclass
class Observed:
    liveness: Liveness
    exit_code: int | None = None
    message: str = ""
    ports: Ports = field(default_factory=Ports)
    handle: Handle | None = None  # set when the executor found the workload without a handle


@dataclass
class Started:
    handle: Handle
    ports: Ports


class Executor(Protocol):
    kind: ExecutorKind

    async def prepare(self, launch: Launch, progress: ProgressFn) -> None: ...

    async def start(self, launch: Launch) -> Started: ...

    async def observe(self, tasks: dict[str, Handle]) -> dict[str, Observed]: ...

    async def stop(self, task_id: str, handle: Handle, timeout_s: float) -> int | None: ...

    async def remove(self, task_id: str, handle: Handle) -> None: ...

    async def orphans(self, known: Iterable[str]) -> list[str]: ...

    async def remove_orphan(self, name: str) -> None: ...

    async def end_job_leftovers(self, task_id: str, handle: Handle) -> int: ...

    async def open(self) -> None: ...

    async def close(self) -> None: ...
