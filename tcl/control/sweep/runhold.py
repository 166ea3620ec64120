"""The leases a scheduler holds on the runs of the entries it places, while it places them: a
run controller or another scheduler that finds such a run (pending, or with an attempt still
provisioning) leaves it alone. Once placed, the lease is dropped and the run is owned by a run
controller like any other."""

from __future__ import annotations

import asyncio
import contextlib

from tcl.control.errors import NoPlacementError, StoreError
from tcl.control.runleases import RunLeases
from tcl.control.sweep.queue import SweepQueue


class RunHold:
    def __init__(self, queue: SweepQueue, owner: str, lease_s: float) -> None:
        self.queue = queue
        self.owner = owner
        self.lease_s = lease_s
        self._run_leases: RunLeases | None = None

    @property
    def run_leases(self) -> RunLeases:
        if self._run_leases is None:
            self._run_leases = RunLeases(self.queue.store)
        return self._run_leases

    async def take(self, run_id: str) -> None:
        """Own the run (its lease); another live owner (a scheduler whose entry lease lapsed
        before its run lease did): not now, the entry goes back to the queue."""
        taken = await asyncio.to_thread(self.run_leases.take, self.owner, run_id, self.lease_s)
        if not taken:
            raise NoPlacementError(f"run {run_id} is still owned by another controller", [])

    async def drop(self, run_id: str) -> None:
        with contextlib.suppress(StoreError):
            await asyncio.to_thread(self.run_leases.drop, self.owner, run_id)

    async def renew(self, runs: set[str]) -> None:
        with contextlib.suppress(StoreError):
            await asyncio.to_thread(self.run_leases.renew, self.owner, runs, self.lease_s)
