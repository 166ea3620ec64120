"""What the dashboard's routes share for the server's life: the store, the sweep queue, the
metric rows, one SSH pool, and the settings it was started with."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import HTTPException
from starlette.requests import HTTPConnection

from tcl.control.metricstore import MetricStore
from tcl.control.phasestore import PhaseStore
from tcl.control.service import Control
from tcl.control.sweep.queue import SweepQueue
from tcl.ui.feeds import Feeds
from tcl.ui.runitems import PlaceCache

if TYPE_CHECKING:
    from tcl.control.config import Config
    from tcl.control.store import Store
    from tcl.control.transport.ssh import SshPool

ACTIONS_OFF = "read-only dashboard: start it with `tcl ui --allow-actions` to stop or requeue"


@dataclass(frozen=True)
class UiSettings:
    token: str
    allow_actions: bool = False
    port: int | None = None  # the port served (names the cookie); None in tests
    hosts_timeout_s: float = 10.0  # a host that has not answered by then shows an error
    stop_grace_s: float = 10.0  # SIGTERM → SIGKILL, as `tcl stop`


class Ui:
    """The server's shared state; each request that reaches hosts gets its own
    :class:`Control` over the shared store and pool (as the ``tcl serve`` daemon does)."""

    def __init__(
        self,
        settings: UiSettings,
        store: Store,
        config: Callable[[], Config],
        start_scheduler: Callable[[], str] | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.config = config  # read per request: the user may edit the file meanwhile
        # places requeued entries (`tcl serve`); None: say that nothing was started
        self.start_scheduler = start_scheduler
        self.queue = SweepQueue(store)
        self.metrics = MetricStore(store)
        self.phases = PhaseStore(store)
        self._pool: SshPool | None = None
        self.viewers = 0  # log WebSockets open now
        self.feeds = Feeds(self)  # one follow per run, shared by its viewers
        self.places = PlaceCache()  # where ended attempts ran (the runs page asks every 2 s)

    @property
    def pool(self) -> SshPool:
        if self._pool is None:
            from tcl.control.transport.ssh import SshPool

            self._pool = SshPool()
        return self._pool

    @asynccontextmanager
    async def control(self) -> AsyncIterator[Control]:
        ctl = Control(self.config(), self.store, self.pool, shared=True)
        try:
            yield ctl
        finally:
            await ctl.aclose()

    def require_actions(self) -> None:
        if not self.settings.allow_actions:
            raise HTTPException(403, ACTIONS_OFF)

    async def aclose(self) -> None:
        await self.feeds.aclose()
        self.queue.close()
        if self._pool is not None:
            await self._pool.close()


def ui_of(request: HTTPConnection) -> Ui:
    """The routes' dependency: the :class:`Ui` the app was made with."""
    ui = request.app.state.ui
    assert isinstance(ui, Ui)
    return ui
