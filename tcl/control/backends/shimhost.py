"""One host with a shim, as the shim-based backends reach it (``local``, ``ssh``; TPU workers).

Answers four questions (cf. submitit's executor hooks): how to reach the shim, how to reach a
task's runner, how the code tarball reaches the runner, and where ``tcl ssh`` should connect.
The run's lifecycle on top of these lives in :mod:`tcl.control.backends.shim`.
"""

from __future__ import annotations

import abc

from tcl.control.backends.base import Progress, SshEndpoint
from tcl.control.placement import LocalPlacement, SshPlacement
from tcl.control.shipping import Snapshot
from tcl.control.transport.agents import RunnerApi, ShimApi
from tcl.shim.api import ExecutorKind


class ShimHost(abc.ABC):
    name: str
    executor: ExecutorKind

    @abc.abstractmethod
    async def shim(self) -> ShimApi:
        """A client for the host's shim (connecting/starting as needed; cached)."""

    async def running_shim(self) -> ShimApi | None:
        """A client for the host's shim if one runs there, never starting one (None where it
        is known not to run; reaching the host is allowed)."""
        return await self.shim()

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
        *,
        cache_checked: bool = False,
    ) -> int:
        """Get the tarball to the runner; return how many bytes crossed the network.
        ``cache_checked``: the runner was asked for the host's cached tree already (a
        ``start`` answered ``waiting_code``), so it is not asked again."""

    async def code_cached(self, snap: Snapshot, progress: Progress | None) -> None:
        """The runner took the tree from the host's code cache: nothing is shipped, and
        what :meth:`prestage_code` started for it is dropped."""
        if progress is not None:
            progress(snap.size, snap.size)

    @abc.abstractmethod
    def peer_address(self) -> str:
        """The host's address as the other nodes of a multi-node job reach it."""

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

    def shell_endpoint(self, task_id: str) -> SshEndpoint | None:
        """Where ``tcl ssh`` lands for a task with no container sshd (a process): none but on
        this machine."""
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
