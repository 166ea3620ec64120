"""The backend interface: a shim to place tasks on, a runner per task, a way to get code there.

Implementations answer four questions (cf. submitit's executor hooks): how to reach the shim,
how to reach a task's runner, how the code tarball reaches the runner, and where ``tcl ssh``
should connect. Everything else (solving, states, logs) lives in the orchestrator.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass

from tcl.control.agents import RunnerApi, ShimApi
from tcl.control.placement import LocalPlacement, SshPlacement
from tcl.control.shipping import Snapshot
from tcl.shim.api import ExecutorKind

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class SshEndpoint:
    """Where ``tcl ssh`` lands: the container sshd, reached through the host as ProxyJump."""

    host: str  # HostName of the jump host
    port: int | None
    user: str | None
    identity_file: str | None
    known_hosts: str | None
    proxy_jump: str | None  # further hops before the host
    container_port: int  # the container sshd's port on the host's loopback


class Backend(abc.ABC):
    kind: str
    name: str
    executor: ExecutorKind

    @abc.abstractmethod
    async def shim(self) -> ShimApi:
        """A client for the host's shim (connecting/starting as needed; cached)."""

    @abc.abstractmethod
    async def runner(self, runner_port: int, token: str, label: str) -> RunnerApi:
        """A fresh client for the runner on the host's ``runner_port`` with its bearer ``token``
        (re-resolve after drops)."""

    @abc.abstractmethod
    async def ship_code(
        self,
        snap: Snapshot,
        runner_port: int,
        runner_token: str,
        runner: RunnerApi,
        progress: Progress | None,
    ) -> int:
        """Get the tarball to the runner; return how many bytes crossed the network."""

    def prestage_code(self, snap: Snapshot, progress: Progress | None = None) -> None:
        """Start whatever :meth:`ship_code` can do before the runner exists (default: nothing).

        Called once the task is accepted, while its container starts; must not block.
        """
        return None

    def placement(self) -> LocalPlacement | SshPlacement | None:
        """How to reach this host's shim again without the config (kept in each attempt)."""
        return None

    def ssh_endpoint(self, task_ssh_port: int) -> SshEndpoint | None:
        """Where ``tcl ssh`` connects for a task whose container sshd is on ``task_ssh_port``."""
        return None

    async def discard_staged(self) -> None:
        """Cancel what :meth:`prestage_code` started and remove what it left (a submit gave
        up); returns once nothing of it is left on the host."""
        return None

    async def reset(self) -> None:
        """Forget connections after an error, so the next call reconnects."""
        return None

    async def aclose(self) -> None:
        """Release connections (never stops remote tasks)."""
        return None
