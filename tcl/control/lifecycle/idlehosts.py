"""Idle cloud nodes deleted: a ``tpu`` host with ``idle_timeout_s`` loses its node once no run
has used it for that long, so nothing stays billed after its runs ended (whether a run or
``tcl host up`` created it). ``tcl hosts`` shows the countdown.

A host is **busy** while a run that has not ended is placed on it; else **idle since** the
latest of its node's creation and the end of the last run placed on it. The daemon looks every
``every_s`` at the hosts with a timeout in the configs its recent runs were submitted with (and
its own default config), deletes the nodes whose time is up, and does not exit while one is
still counting down (:attr:`IdleHosts.pending`): otherwise nobody would delete it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tcl.control.config import TpuHost
from tcl.control.errors import StoreError, TclError
from tcl.control.lifecycle.ownership import run_config
from tcl.control.paths import config_path
from tcl.control.service import Control
from tcl.control.store import Attempt, Run, Store

log = logging.getLogger("tcl.serve")


@dataclass(frozen=True)
class IdleSettings:
    every_s: float = 30.0  # between looks
    recent_runs: int = 500  # the configs of this many latest runs are looked at


@dataclass(frozen=True)
class IdleNode:
    """A host's node and how long it has been idle."""

    host: str
    node_id: str
    timeout_s: float
    idle_since: float | None  # None: busy (a run not ended is placed on it)

    def delete_at(self) -> float | None:
        return None if self.idle_since is None else self.idle_since + self.timeout_s

    def left_s(self, now: float) -> float | None:
        """Seconds until it is deleted (None: busy; 0: due)."""
        at = self.delete_at()
        return None if at is None else max(0.0, at - now)


def idle_since(
    host: str, runs: Iterable[Run], attempts: dict[str, list[Attempt]], created_at: float | None
) -> float | None:
    """When ``host`` became idle (None: busy): the latest of the node's creation and the end of
    the last run placed on it."""
    since = created_at or 0.0
    for run in runs:
        mine = [a for a in attempts.get(run.id, []) if a.host == host]
        if run.host != host and not mine:
            continue
        if not run.state.is_final:
            return None
        ended = [a.ended_at for a in mine if a.ended_at is not None]
        since = max(since, max(ended, default=run.updated_at))
    return since


async def idle_node(
    ctl: Control, host: str, runs: list[Run], attempts: dict[str, list[Attempt]]
) -> IdleNode | None:
    """The host's node with its idle time, when the host has a timeout and a usable node."""
    cfg = ctl.cfg.hosts.get(host)
    if not isinstance(cfg, TpuHost) or cfg.idle_timeout_s is None:
        return None  # asked of every host each pass: the TPU backend is imported only past here
    from tcl.control.backends.tpu.api import USABLE
    from tcl.control.backends.tpu.backend import TpuBackend

    backend = ctl.backend_of(host)
    if not isinstance(backend, TpuBackend):
        return None
    node = await backend.api(host).get_node(backend.node_id(host))
    if node is None or node.state not in USABLE:
        return None
    since = idle_since(host, runs, attempts, node.created_at)
    return IdleNode(host, node.node_id, cfg.idle_timeout_s, since)


async def recent_runs(store: Store, limit: int) -> tuple[list[Run], dict[str, list[Attempt]]]:
    runs = await asyncio.to_thread(store.list_runs, True, limit)
    return runs, await asyncio.to_thread(store.attempts_of, [r.id for r in runs])


async def idle_nodes(
    ctl: Control,
    runs: list[Run],
    attempts: dict[str, list[Attempt]],
    skip: Iterable[str] = (),
) -> dict[str, IdleNode]:
    """The nodes of this config's hosts with a timeout (but those in ``skip``), by host; a host
    whose API does not answer is left out (its check says so; the daemon looks again)."""
    found: dict[str, IdleNode] = {}
    for host in ctl.cfg.hosts:
        if host in skip:
            continue
        try:
            node = await idle_node(ctl, host, runs, attempts)
        except TclError as e:
            log.info("idle hosts: %s: %s", host, e)
            continue
        if node is not None:
            found[host] = node
    return found


class IdleHosts:
    """``controls()``: a Control for each config to look at (they name the hosts)."""

    def __init__(
        self,
        store: Store,
        control_for: Callable[[str, bool], Control],
        settings: IdleSettings | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.store = store
        self.control_for = control_for
        self.settings = settings or IdleSettings()
        self.on_error = on_error
        self.pending = 0  # nodes counting down: the daemon stays for them

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await self.sweep()
            except (StoreError, TclError) as e:
                log.warning("idle hosts: %s; next time", e)
                if self.on_error is not None:
                    self.on_error(e)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.settings.every_s)

    async def sweep(self, now: float | None = None) -> list[str]:
        """One look; the hosts whose node it deleted."""
        runs, attempts = await recent_runs(self.store, self.settings.recent_runs)
        default, named = config_path()
        configs = {run_config(r) for r in runs} | {(str(default), named)}
        deleted: list[str] = []
        pending = 0
        seen: set[str] = set()
        for path, config_named in sorted(configs):
            try:
                ctl = self.control_for(path, config_named)
            except TclError as e:  # a config gone or broken since: its hosts are not looked at
                log.info("idle hosts: config %s: %s", path, e)
                continue
            nodes = await idle_nodes(ctl, runs, attempts, skip=seen)
            seen.update(ctl.cfg.hosts)
            for host, node in nodes.items():
                left = node.left_s(now if now is not None else time.time())
                if left is None or left > 0 or not await self._still_idle(host, node):
                    pending += 1
                    continue
                log.info("idle hosts: %s idle for %.0f s: deleting its node", host, node.timeout_s)
                await ctl.backend_of(host).teardown(host)
                deleted.append(host)
        self.pending = pending
        return deleted

    async def _still_idle(self, host: str, node: IdleNode) -> bool:
        """Asked again just before the node goes: a run placed on it since the look keeps it."""
        runs, attempts = await recent_runs(self.store, self.settings.recent_runs)
        return idle_since(host, runs, attempts, node.idle_since) is not None
