"""The ``local`` backend: a shim on this machine (no SSH), process executor by default."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tcl.control.backends.base import Progress, SshEndpoint
from tcl.control.backends.shim import ShimBackend
from tcl.control.backends.shimhost import ShimHost
from tcl.control.config import LocalHost
from tcl.control.localshim import ensure_local_shim, running_local_shim, task_dir
from tcl.control.paths import state_dir
from tcl.control.placement import LocalPlacement, SshPlacement
from tcl.control.shipping import Snapshot
from tcl.control.transport.agents import RunnerApi, ShimApi
from tcl.control.transport.httpagents import HttpRunner, HttpShim
from tcl.shim.api import SHELL_ENV_FILE, ExecutorKind


class LocalShimHost(ShimHost):
    def __init__(self, name: str, cfg: LocalHost, shim_state_dir: Path | None = None) -> None:
        self.name = name
        self.cfg = cfg
        self.shim_state_dir = shim_state_dir or state_dir() / "local-shim"
        self.executor = ExecutorKind(cfg.executor)
        self._shim: HttpShim | None = None

    async def shim(self) -> ShimApi:
        if self._shim is None:
            local = await asyncio.to_thread(ensure_local_shim, *self._shim_args())
            self._shim = HttpShim(
                "http://localhost",
                local.token,
                name=f"shim {self.name}",
                uds=local.socket,
                on_unauthorized=self._forget_shim,
            )
        return self._shim

    def _forget_shim(self) -> None:
        """The shim refused our token (another tcl started it anew, with a new token): the next
        call makes a new client, with the token it wrote."""
        self._shim = None

    async def running_shim(self) -> ShimApi | None:
        if self._shim is None and not await asyncio.to_thread(
            running_local_shim, *self._shim_args()
        ):
            return None
        return await self.shim()

    def _shim_args(self) -> tuple[Path, str, str | None]:
        """Its shim's state dir and flags (the shim of another config is not this one)."""
        return self.shim_state_dir, self.cfg.executor, self.cfg.fake_accelerators

    def placement(self) -> LocalPlacement:
        return LocalPlacement(
            shim_state_dir=str(self.shim_state_dir),
            executor=self.cfg.executor,
            fake_accelerators=self.cfg.fake_accelerators,
        )

    def peer_address(self) -> str:
        return "127.0.0.1"

    def shell_endpoint(self, task_id: str) -> SshEndpoint | None:
        """A shell right here, in the job's dir with its env (what its runner wrote)."""
        env_file = task_dir(self.shim_state_dir, task_id) / SHELL_ENV_FILE
        return SshEndpoint(
            host="this machine",
            port=None,
            user=None,
            identity_file=None,
            known_hosts=None,
            proxy_jump=None,
            local_env_file=str(env_file),
        )

    async def runner(self, runner_port: int, token: str, label: str) -> RunnerApi:
        return HttpRunner(f"http://127.0.0.1:{runner_port}", token, name=f"runner {label}")

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
        await runner.upload_code(snap.tarball, snap.sha256, progress, ask_cache=not cache_checked)
        return 0  # loopback: nothing crossed the network

    async def reset(self) -> None:
        # a new client for what comes next; the old one closes once its calls in flight end
        # (another caller's call is not failed by this one's dropped connection)
        if self._shim is not None:
            old, self._shim = self._shim, None
            await old.retire()

    async def aclose(self) -> None:
        if self._shim is not None:
            await self._shim.aclose()
            self._shim = None


class LocalBackend(ShimBackend):
    kind = "local"
    runs_here = True

    def _make_host(self, name: str, record: LocalPlacement | SshPlacement | None) -> ShimHost:
        cfg = self.inputs.hosts.get(name)
        if isinstance(cfg, LocalHost):
            return LocalShimHost(name, cfg)
        if isinstance(record, LocalPlacement):  # a host renamed or removed since
            host = LocalHost(
                type="local",
                executor=record.executor,
                fake_accelerators=record.fake_accelerators,
            )
            return LocalShimHost(name, host, Path(record.shim_state_dir))
        raise self.unknown_host(name)
