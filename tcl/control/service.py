"""The control plane as one object the CLI calls: config + store + SSH pool + backends."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tcl.control.backends.base import Backend, BackendInputs, Handle
from tcl.control.backends.table import backend_class
from tcl.control.config import Config
from tcl.control.errors import TclError

if TYPE_CHECKING:
    from tcl.control.metricstore import MetricStore
    from tcl.control.phasestore import PhaseStore
    from tcl.control.retries import Retries
    from tcl.control.store import Attempt, Store
    from tcl.control.transport.ssh import SshPool


@dataclass(frozen=True)
class HostStatus:
    name: str
    type: str
    address: str
    reachable: bool | None  # None: not checked
    detail: str  # what it offers, or why it cannot be used
    info: Any = None  # the host's own report (a shim's HostInfo)


class Control:
    """Holds the connections of one CLI command; :meth:`aclose` releases them."""

    def __init__(
        self,
        cfg: Config,
        store: Store | None = None,
        pool: SshPool | Callable[[], SshPool] | None = None,
        shared: bool = False,
    ) -> None:
        self.cfg = cfg
        self._store = store
        # a pool, or its owner's accessor (the daemon makes its pool on first use)
        self._pool: SshPool | None = None
        self._pool_of: Callable[[], SshPool] | None = None
        if callable(pool):
            self._pool_of = pool
        else:
            self._pool = pool
        # shared: the store and pool belong to a longer-lived owner (the `tcl serve` daemon,
        # one Control per request): :meth:`aclose` leaves them open
        self._shared = shared
        self._backends: dict[str, Backend] = {}  # by kind
        self._retries: Retries | None = None
        self._metrics: MetricStore | None = None
        self._phases: PhaseStore | None = None

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
    def retries(self) -> Retries:
        """Retry bookkeeping (runs with a retry policy), on the same store."""
        if self._retries is None:
            from tcl.control.retries import Retries

            self._retries = Retries(self.store)
        return self._retries

    @property
    def metrics(self) -> MetricStore:
        """The runs' metric points (kept by each pull), on the same store."""
        if self._metrics is None:
            from tcl.control.metricstore import MetricStore

            self._metrics = MetricStore(self.store)
        return self._metrics

    @property
    def phases(self) -> PhaseStore:
        """When the runs' attempts reached each phase of their start (kept by each pull)."""
        if self._phases is None:
            from tcl.control.phasestore import PhaseStore

            self._phases = PhaseStore(self.store)
        return self._phases

    @property
    def pool(self) -> SshPool:
        """The SSH pool, made on first use (asyncssh is imported only then)."""
        if self._pool is None:
            if self._pool_of is not None:
                self._pool = self._pool_of()
            else:
                from tcl.control.transport.ssh import SshPool

                self._pool = SshPool()
        return self._pool

    def _backend_of_class(self, cls: type[Backend]) -> Backend:
        b = self._backends.get(cls.kind)
        if b is None:
            hosts = {
                n: h for n, h in self.cfg.hosts.items() if _class_or_none(h.type) is cls
            }  # the config's hosts this backend serves, in file order
            inputs = BackendInputs(
                hosts=hosts,
                clusters=self.cfg.clusters,
                gres_mapping=self.cfg.gres_mapping,
                ssh_pool=lambda: self.pool,
            )
            b = self._backends[cls.kind] = cls(inputs)
        return b

    def backend_of(self, host: str) -> Backend:
        """The backend of a config host."""
        cfg = self.cfg.hosts.get(host)
        if cfg is None:
            raise TclError(f"host {host!r} is not in the config (see `tcl hosts`)")
        return self._backend_of_class(backend_class(cfg.type))

    def backend_for_kind(self, kind: str) -> Backend:
        """A backend by its kind (a key of the table)."""
        return self._backend_of_class(backend_class(kind))

    def backend_for(self, att: Attempt) -> Backend:
        """The backend an attempt was launched with."""
        return self.backend_for_kind(att.backend)

    def handle(self, att: Attempt) -> Handle:
        """The attempt's typed handle (``host``: for handles stored before the contract)."""
        return self.backend_for(att).load_handle({"host": att.host, **att.handle})

    async def host_statuses(self, check: bool, timeout_s: float | None = None) -> list[HostStatus]:
        """Every config host in solver order; with ``check``, what each offers now. With
        ``timeout_s``, a host that has not answered by then is reported unreachable (a dashboard
        must not hang on one dead host)."""

        async def one(name: str) -> HostStatus:
            host = self.cfg.hosts[name]
            try:
                b = self.backend_of(name)
            except TclError as e:
                return HostStatus(name, host.type, "", False if check else None, str(e))
            addr = b.address(name)
            if not check:
                return HostStatus(name, host.type, addr, None, "")
            try:
                res = await asyncio.wait_for(b.check(name), timeout_s)
            except TimeoutError:
                return HostStatus(name, host.type, addr, False, f"no answer within {timeout_s:g} s")
            return HostStatus(name, host.type, addr, res.reachable, res.detail, res.info)

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


def _class_or_none(host_type: str) -> type[Backend] | None:
    try:
        return backend_class(host_type)
    except TclError:
        return None
