"""The hardware solver (seed 000's strategy for ``local`` and ``ssh`` hosts).

Hosts are tried in ``priority`` order, then the rest in file order. Cluster filters and a
``--host`` pin narrow the list; a host whose configured ``chips`` cannot hold the requested chip
type is skipped without being contacted. The others are probed in parallel: free accelerators
come from each shim's ``/api/host`` (held by no task and not busy outside tcl). The result is an
ordered list of candidates, so a ``no_capacity`` at launch moves on to the next one; when nothing
fits, :class:`NoPlacementError` lists what every host offers right now.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tcl.control.config import Config, LocalHost, SshHost
from tcl.control.errors import NoPlacementError, TclError
from tcl.shim.api import HostInfo

Probe = Callable[[str], Awaitable[HostInfo]]


@dataclass(frozen=True)
class Request:
    chip: str | None = None  # None: any chip type (or CPU only when chips == 0)
    chips: int = 0
    host: str | None = None  # pin to one host
    preferred_clusters: tuple[str, ...] = ()
    forbidden_clusters: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.chips == 0:
            return "a CPU-only job"
        return f"{self.chips} x {self.chip or 'any accelerator'}"


@dataclass(frozen=True)
class Candidate:
    host: str
    free: tuple[int, ...]  # free accelerator indices of the requested type
    chip: str | None


@dataclass
class Solution:
    candidates: list[Candidate]
    skipped: list[tuple[str, str]] = field(default_factory=list)  # host, reason


def offer(info: HostInfo) -> str:
    """What a host offers now, e.g. ``h100: 6 of 8 free``."""
    if not info.accelerators:
        return f"no accelerators ({info.cpus} CPUs)"
    total = Counter(a.chip for a in info.accelerators)
    free = Counter(a.chip for a in info.accelerators if a.task_id is None and not a.busy_outside)
    return ", ".join(f"{chip}: {free[chip]} of {n} free" for chip, n in sorted(total.items()))


def _free(info: HostInfo, chip: str | None) -> tuple[int, ...]:
    return tuple(
        a.index
        for a in info.accelerators
        if a.task_id is None and not a.busy_outside and (chip is None or a.chip == chip)
    )


def _static_reason(name: str, cfg: Config, req: Request) -> str | None:
    """Why a host is out without contacting it (None: it must be probed)."""
    host = cfg.hosts[name]
    if not isinstance(host, LocalHost | SshHost):
        return f"type {host.type} is not handled by this solver yet"
    if req.preferred_clusters and host.cluster not in req.preferred_clusters:
        return f"cluster {host.cluster} not preferred"
    if host.cluster is not None and host.cluster in req.forbidden_clusters:
        return f"cluster {host.cluster} forbidden"
    if req.chips and req.chip and host.chips and req.chip not in host.chips:
        return f"configured chips: {', '.join(f'{k}:{v}' for k, v in host.chips.items())}"
    if req.chips and req.chip and host.chips and host.chips[req.chip] < req.chips:
        return f"configured {req.chip}: {host.chips[req.chip]}"
    return None


async def solve(cfg: Config, req: Request, probe: Probe) -> Solution:
    """Ordered candidates for ``req``; raises :class:`NoPlacementError` when nothing fits."""
    names = cfg.ordered_hosts()
    if req.host is not None:
        if req.host not in cfg.hosts:
            known = [(n, "configured") for n in names]
            raise NoPlacementError(f"no host named {req.host!r}", known)
        names = [req.host]
    reasons: dict[str, str] = {}
    to_probe = []
    for name in names:
        why = _static_reason(name, cfg, req)
        if why is None:
            to_probe.append(name)
        else:
            reasons[name] = why

    async def one(name: str) -> HostInfo | str:
        try:
            return await probe(name)
        except TclError as e:
            return f"unreachable: {e}"

    results = dict(zip(to_probe, await asyncio.gather(*(one(n) for n in to_probe)), strict=True))
    candidates: list[Candidate] = []
    for name in names:
        res = results.get(name)
        if res is None:
            continue
        if isinstance(res, str):
            reasons[name] = res
            continue
        free = _free(res, req.chip) if req.chips else ()
        if len(free) >= req.chips:
            candidates.append(Candidate(name, free, req.chip))
        else:
            reasons[name] = offer(res)
    skipped = [(n, reasons[n]) for n in names if n in reasons]
    if not candidates:
        down = [n for n in to_probe if isinstance(results[n], str)]
        if req.host is not None and down:  # "nothing fits" would blame the request
            raise NoPlacementError(f"host {req.host} is {reasons[req.host]}", [])
        if down and len(down) == len(names):
            raise NoPlacementError("no host can be reached; hosts now:", skipped)
        raise NoPlacementError(f"nothing fits {req.describe()}; hosts now:", skipped)
    return Solution(candidates, skipped)
