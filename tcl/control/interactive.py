"""Reaching a run's interactive session: wait until it answers, forward a port to it.

Generic over backends: everything goes through :meth:`Backend.runner` (a fresh client for the
node's runner API, over whatever tunnel the host needs), so ``tcl repl``, ``tcl sync`` and
``@tcl.remote`` work wherever a backend can hand one out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tcl.control.errors import AgentError, AgentUnreachableError, SshError, TclError
from tcl.control.transport.portforward import PortForward

if TYPE_CHECKING:
    from tcl.control.backends.base import Backend, Handle
    from tcl.control.service import Control
    from tcl.control.transport.agents import ForwardStream, RunnerApi
    from tcl.runner.api import SessionInfo

READY_POLL_S = 0.5


@dataclass
class Target:
    """A run's node whose runner serves the session. The forward's streams and the syncs share
    one runner client (its port and token come from the host's agent: one round trip saved
    per use); a failure drops it, and the next use re-resolves through a new tunnel."""

    run_id: str
    backend: Backend
    handle: Handle
    node: int = 0
    _api: RunnerApi | None = None

    async def runner(self) -> RunnerApi:
        """A fresh client (the caller closes it)."""
        return await self.backend.runner(self.handle, self.node)

    async def api(self) -> RunnerApi:
        """The shared client (made on first use; :meth:`reset` drops it)."""
        if self._api is None:
            self._api = await self.runner()
        return self._api

    async def reset(self) -> None:
        await self.aclose()
        await self.backend.reset(self.handle)

    async def open_stream(self) -> ForwardStream:
        api = await self.api()
        try:
            return await api.open_forward()
        except TclError:
            if self._api is api:
                await self.aclose()
            raise

    async def aclose(self) -> None:
        api, self._api = self._api, None
        if api is not None:
            await api.aclose()


def target(ctl: Control, run_id: str) -> Target | None:
    """The run's latest attempt as a target (None: nothing placed yet)."""
    att = ctl.store.latest_attempt(run_id)
    if att is None or not att.handle:
        return None
    return Target(run_id, ctl.backend_for(att), ctl.handle(att))


async def wait_ready(
    ctl: Control, run_id: str, timeout_s: float, status: Callable[[str], None] | None = None
) -> tuple[Target, SessionInfo]:
    """Poll until the run's session accepts connections; TclError once the run has ended
    (with its message), or after ``timeout_s``. Waits through a queue (a batch scheduler)."""
    deadline = time.monotonic() + timeout_s
    said = ""
    while True:
        run = ctl.store.get_run(run_id)
        why = run.message or run.state.value
        if run.state.is_final:
            raise TclError(f"run {run_id} is {run.state.value}: {run.message or 'it ended'}")
        tgt = target(ctl, run_id)
        if tgt is not None:
            try:
                runner = await tgt.runner()
                try:
                    info = await runner.session()
                finally:
                    await runner.aclose()
                if info.ready:
                    return tgt, info
                why = f"session {info.detail or 'starting'}"
            except (AgentUnreachableError, SshError) as e:
                why = str(e)
                await tgt.reset()
            except AgentError as e:  # 409: the job has not started yet
                why = str(e).split(": ", 1)[-1]
            except TclError as e:  # the backend has no runner to reach (its task ended)
                why = str(e)
        if status is not None and why != said:
            status(why)
            said = why
        if time.monotonic() > deadline:
            raise TclError(f"run {run_id}: its session did not answer in {timeout_s:.0f} s ({why})")
        await asyncio.sleep(READY_POLL_S)


def forward(
    tgt: Target, port: int = 0, on_reconnect: Callable[[str], None] | None = None
) -> PortForward:
    """A local port forwarded to the session (call ``start()``)."""
    return PortForward(
        tgt.open_stream, tgt.reset, port=port, on_reconnect=on_reconnect, on_close=tgt.aclose
    )
