"""Deterministic, all-or-nothing accelerator allocation.

A request is a count, ``"all"`` or explicit indices. A count takes the lowest free indices inside
the first topology domain (NVLink group, then NUMA node) that can hold it whole, else the lowest
free indices overall. Either every asked-for accelerator is granted or none is (``NoCapacity``,
naming what is free). One lock makes concurrent requests from threads or tasks safe.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Literal

from tcl.shim.errors import BadRequest, NoCapacity
from tcl.shim.inventory import Topology

Request = int | Literal["all"] | list[int]


class Allocator:
    def __init__(self, indices: Iterable[int], topology: Topology | None = None) -> None:
        self._indices = sorted(set(indices))
        self._topology = topology or Topology()
        self._held: dict[int, str] = {}  # index -> task id
        self._lock = threading.Lock()

    @property
    def indices(self) -> list[int]:
        return list(self._indices)

    def held(self) -> dict[int, str]:
        with self._lock:
            return dict(self._held)

    def free(self, unavailable: Iterable[int] = ()) -> list[int]:
        with self._lock:
            return self._free(set(unavailable))

    def _free(self, unavailable: set[int]) -> list[int]:
        return [i for i in self._indices if i not in self._held and i not in unavailable]

    def allocate(
        self, task_id: str, request: Request, unavailable: Iterable[int] = ()
    ) -> list[int]:
        """Grant ``request`` to ``task_id`` or raise NoCapacity.

        ``unavailable``: indices busy with processes outside tcl."""
        with self._lock:
            if task_id in self._held.values():
                raise BadRequest(f"task {task_id!r} already holds accelerators")
            free = self._free(set(unavailable))
            chosen = self._choose(request, free)
            for i in chosen:
                self._held[i] = task_id
            return chosen

    def _choose(self, request: Request, free: list[int]) -> list[int]:
        if request == "all":
            if len(free) != len(self._indices):
                raise NoCapacity(
                    f"accelerators: all {len(self._indices)} asked for, {len(free)} free "
                    f"(free: {free})",
                    free,
                )
            return list(free)
        if isinstance(request, list):
            unknown = sorted(set(request) - set(self._indices))
            if unknown:
                raise BadRequest(
                    f"accelerators: no accelerator with index {unknown} on this "
                    f"host (indices: {self._indices})"
                )
            if len(set(request)) != len(request):
                raise BadRequest(f"accelerators: index listed twice in {request}")
            taken = sorted(set(request) - set(free))
            if taken:
                raise NoCapacity(f"accelerators: {taken} not free (free: {free})", free)
            return sorted(request)
        if request > len(free):
            raise NoCapacity(
                f"accelerators: {request} asked for, {len(free)} free (free: {free})", free
            )
        if request == 0:
            return []
        free_set = set(free)
        for domain in self._topology.domains:
            inside = sorted(domain & free_set)
            if len(inside) >= request:
                return inside[:request]
        return free[:request]

    def restore(self, task_id: str, indices: Iterable[int]) -> None:
        """Re-mark accelerators of a task adopted after a restart (no capacity check: facts)."""
        with self._lock:
            for i in indices:
                self._held[i] = task_id

    def release(self, task_id: str) -> list[int]:
        with self._lock:
            mine = [i for i, t in self._held.items() if t == task_id]
            for i in mine:
                del self._held[i]
            return sorted(mine)
