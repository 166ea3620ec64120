"""The lease a ``tcl submit`` holds on its run while it places it: no controller adopts the
run meanwhile, and if the submit dies the lease lapses and the next controller adopts what the
placement left (:mod:`tcl.control.lifecycle.adopt`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from tcl.control.errors import StoreError
from tcl.control.lifecycle.ownership import ControllerSettings, controller_id
from tcl.control.runleases import RunLeases
from tcl.control.store import Store


@contextlib.asynccontextmanager
async def placing(
    store: Store, run_id: str, settings: ControllerSettings | None = None
) -> AsyncIterator[None]:
    """Hold a run's lease while it is placed (a ``tcl submit``): no controller adopts it
    meanwhile; if this process dies, the lease lapses and the next controller adopts what the
    placement left (:mod:`tcl.control.lifecycle.adopt`)."""
    s = settings or ControllerSettings()
    leases = RunLeases(store)
    owner = controller_id("submit")
    taking = asyncio.ensure_future(asyncio.to_thread(leases.take, owner, run_id, s.lease_s))
    try:
        await asyncio.shield(taking)
    except asyncio.CancelledError:
        # (a Ctrl-C as the submit starts) the take goes on in its thread: once it is done,
        # the lease is given up again, or it would outlive the run the submit deletes
        with contextlib.suppress(StoreError, asyncio.CancelledError):
            await taking
            await asyncio.to_thread(leases.drop, owner, run_id)
        raise

    async def renew() -> None:
        while True:
            await asyncio.sleep(s.heartbeat_s)
            with contextlib.suppress(StoreError):
                await asyncio.to_thread(leases.renew, owner, {run_id}, s.lease_s)

    renewing = asyncio.create_task(renew())
    try:
        yield
    finally:
        renewing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewing
        with contextlib.suppress(StoreError):
            await asyncio.to_thread(leases.drop, owner, run_id)
