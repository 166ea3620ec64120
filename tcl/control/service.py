"""The control plane as one object the CLI calls: config + store + SSH pool + backends."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tcl.control.backends.base import Backend
from tcl.control.config import Config, LocalHost, SshHost
from tcl.control.errors import AgentError, TclError, UnknownHostError
from tcl.shim.api import HostInfo

if TYPE_CHECKING:
    from tcl.control.placement import LocalPlacement, SshPlacement
    from tcl.control.ssh import SshPool
    from tcl.control.store import Attempt, Store

PROBE_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class HostStatus:
    name: str
    type: str
    address: str
    reachable: bool | None  # None: not checked
    detail: str  # what it offers, or why it cannot be used
    info: HostInfo | None = None


class Control:
    """Holds the connections of one CLI command; :meth:`aclose` releases them."""

    def __init__(
        self, cfg: Config, store: Store | None = None, pool: SshPool | None = None,
        shared: bool = False,
    ) -> None:  # fmt: skip
        self.cfg = cfg
        self._store = store
        self._pool = pool
        # shared: the store and pool belong to a longer-lived owner (the `tcl serve` daemon,
        # one Control per request): :meth:`aclose` leaves them open
        self._shared = shared
        self._backends: dict[str, Backend] = {}

    @property
    def store(self) -> Store:
        """The state store, opened on first use (SQLAlchemy is imported only then, so a submit
        can import it while its SSH connection opens)."""
        if self._store is None:
            from tcl.control.paths import db_url
            from tcl.control.store import Store

            self._store = Store(db_url())
        return self._store

    @property
    def pool(self) -> SshPool:
        """The SSH pool, made on first use (asyncssh is imported only then)."""
        if self._pool is None:
            from tcl.control.ssh import SshPool

            self._pool = SshPool()
        return self._pool

    def backend(self, name: str) -> Backend:
        b = self._backends.get(name)
        if b is not None:
            return b
        host = self.cfg.hosts.get(name)
        if host is None:
            raise TclError(f"host {name!r} is not in the config (see `tcl hosts`)")
        if isinstance(host, LocalHost):
            from tcl.control.backends.local import LocalBackend

            b = LocalBackend(name, host)
        elif isinstance(host, SshHost):
            from tcl.control.backends.ssh import SshBackend

            b = SshBackend(name, host, self.pool)
        else:
            raise TclError(f"host {name!r}: type {host.type} has no backend in this version")
        self._backends[name] = b
        return b

    def backend_for(self, att: Attempt) -> Backend:
        """The backend of an attempt's host: from the config while the host is in it, else
        from the placement record the attempt kept (a host renamed or removed since)."""
        if att.host in self._backends or att.host in self.cfg.hosts:
            return self.backend(att.host)
        rec = att.placement
        if rec is None:
            raise UnknownHostError(
                f"host {att.host!r} is not in the config (see `tcl hosts`) and run "
                f"{att.run_id} kept no record of how to reach it"
            )
        b = self._from_placement(att.host, rec)
        self._backends[att.host] = b
        return b

    def _from_placement(self, name: str, rec: LocalPlacement | SshPlacement) -> Backend:
        from tcl.control.placement import LocalPlacement

        if isinstance(rec, LocalPlacement):
            from pathlib import Path

            from tcl.control.backends.local import LocalBackend

            host = LocalHost(
                type="local", executor=rec.executor, fake_accelerators=rec.fake_accelerators
            )
            return LocalBackend(name, host, Path(rec.shim_state_dir))
        from tcl.control.backends.ssh import SshBackend

        ssh = SshHost(
            type="ssh", ssh=rec.ssh, port=rec.port, user=rec.user, proxy_jump=rec.proxy_jump,
            identity_file=rec.identity_file, known_hosts=rec.known_hosts,
            ssh_config_file=rec.ssh_config_file, shim_port=rec.shim_port, shim_dir=rec.shim_dir,
            shim_venv=rec.shim_venv, executor=rec.executor,
        )  # fmt: skip
        return SshBackend(name, ssh, self.pool)

    async def probe(self, name: str) -> HostInfo:
        """What the host's shim reports now (``GET /api/host``)."""
        b = self.backend(name)
        try:
            shim = await asyncio.wait_for(b.shim(), PROBE_TIMEOUT_S)
            return await asyncio.wait_for(shim.host(), PROBE_TIMEOUT_S)
        except TimeoutError:
            raise AgentError(f"{name}: no answer within {PROBE_TIMEOUT_S:.0f} s") from None

    async def host_statuses(self, check: bool) -> list[HostStatus]:
        from tcl.control.solver import offer

        async def one(name: str) -> HostStatus:
            host = self.cfg.hosts[name]
            addr = getattr(host, "ssh", "") or ("this machine" if host.type == "local" else "")
            if not check:
                return HostStatus(name, host.type, addr, None, "")
            try:
                info = await self.probe(name)
            except TclError as e:
                return HostStatus(name, host.type, addr, False, str(e).splitlines()[0])
            return HostStatus(name, host.type, addr, True, offer(info), info)

        return list(await asyncio.gather(*(one(n) for n in self.cfg.ordered_hosts())))

    async def aclose(self) -> None:
        for b in self._backends.values():
            await b.aclose()
        if self._shared:
            return
        if self._pool is not None:
            await self._pool.close()
        if self._store is not None:
            self._store.close()
