"""The hardware solver (seed 000's strategy), generic over backends.

Hosts are tried in ``priority`` order, then the rest in file order. Cluster filters and a
``--host`` pin narrow the list; a host whose configured ``chips`` cannot hold the request is
skipped without being contacted. Every backend is then asked, in parallel, what its remaining
hosts can place (:meth:`Backend.offers`: a shim's free accelerators, a SLURM partition's idle
GRES, several hosts of one cluster for a multi-node request). The result is an ordered list of
offers that start now, so a ``no_capacity`` at launch moves on to the next one; when none does,
the seed's fallback: the queueing offer with the most free chips (a SLURM host). When nothing
fits at all, :class:`NoPlacementError` lists what every host offers right now.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tcl.control.config import Config
from tcl.control.errors import ConfigError, NoPlacementError, TclError

if TYPE_CHECKING:
    from tcl.control.backends.base import Backend, Offer, Offers


@dataclass(frozen=True)
class Request:
    chip: str | None = None  # None: any chip type (or CPU only when chips == 0)
    chips: int = 0  # in all, over every node
    nodes: int = 0  # 0: as many as the chips need (one when they fit on one node)
    host: str | None = None  # pin to one host (or one cluster of hosts)
    preferred_clusters: tuple[str, ...] = ()  # ``--cluster``: only hosts of these
    forbidden_clusters: tuple[str, ...] = ()  # ``--avoid-cluster``: no host of these
    # backend options from the CLI (``tpu.version``, ``tpu.spot``, ``down``): each backend
    # reads the keys it knows
    options: Mapping[str, str] = field(default_factory=dict)
    interactive: bool = False  # a session (`tcl repl`, `@tcl.remote`): its runner is reached

    def describe(self) -> str:
        nodes = f" on {self.nodes} nodes" if self.nodes > 1 else ""
        if self.chips == 0:
            return f"a CPU-only job{nodes}"
        return f"{self.chips} x {self.chip or 'any accelerator'}{nodes}"


@dataclass
class Solution:
    candidates: list[Offer]  # start now, best first
    queue: Offer | None = None  # nothing starts now: where to queue instead
    skipped: list[tuple[str, str]] = field(default_factory=list)  # host, reason

    @property
    def plans(self) -> list[Offer]:
        return self.candidates or ([self.queue] if self.queue is not None else [])


BackendOf = Callable[[str], "Backend"]


def _static_reason(name: str, cfg: Config, req: Request) -> str | None:
    """Why a host is out without contacting it (None: its backend must be asked)."""
    host = cfg.hosts[name]
    if req.preferred_clusters and host.cluster not in req.preferred_clusters:
        where = f"cluster {host.cluster}" if host.cluster else "no cluster"
        return f"{where}, not {' or '.join(req.preferred_clusters)} (--cluster)"
    if host.cluster is not None and host.cluster in req.forbidden_clusters:
        return f"cluster {host.cluster} avoided (--avoid-cluster)"
    asked = host.cluster in req.preferred_clusters or req.host in (name, host.cluster)
    if host.cluster is not None and host.cluster in cfg.avoid and not asked:
        return f"cluster {host.cluster} avoided (the config's avoid; --cluster uses it)"
    if req.chips and req.chip and host.chips and req.chip not in host.chips:
        return f"configured chips: {', '.join(f'{k}:{v}' for k, v in host.chips.items())}"
    return None


def _pinned(cfg: Config, names: list[str], pin: str) -> list[str]:
    if pin in cfg.hosts:
        return [pin]
    members = [n for n in names if cfg.hosts[n].cluster == pin]
    if members:
        return members
    raise NoPlacementError(f"no host named {pin!r}", [(n, "configured") for n in names])


async def solve(cfg: Config, req: Request, backend_of: BackendOf) -> Solution:
    """Ordered offers for ``req``; raises :class:`NoPlacementError` when nothing fits."""
    for flag, asked in (
        ("--cluster", req.preferred_clusters),
        ("--avoid-cluster", req.forbidden_clusters),
    ):
        unknown = [c for c in asked if c not in cfg.clusters]
        if unknown:
            known = ", ".join(sorted(cfg.clusters)) or "none in the config"
            raise ConfigError(f"{flag} {', '.join(unknown)}: no such cluster (clusters: {known})")
    order = cfg.ordered_hosts()
    names = order if req.host is None else _pinned(cfg, order, req.host)
    reasons: dict[str, str] = {}
    by_backend: dict[int, tuple[Backend, list[str]]] = {}
    for name in names:
        why = _static_reason(name, cfg, req)
        if why is None:
            try:
                b = backend_of(name)
            except TclError as e:
                why = str(e)
            else:
                if req.interactive and not b.interactive:
                    why = f"{b.kind} hosts do not run interactive sessions"
                else:
                    by_backend.setdefault(id(b), (b, []))[1].append(name)
        if why is not None:
            reasons[name] = why

    async def ask(b: Backend, hosts: list[str]) -> Offers:
        try:
            return await b.offers(req, hosts)
        except TclError as e:
            from tcl.control.backends.base import Offers

            return Offers(refused=[(h, f"unreachable: {e}") for h in hosts])

    answers = await asyncio.gather(*(ask(b, hs) for b, hs in by_backend.values()))
    offers: list[Offer] = []
    for ans in answers:
        offers.extend(ans.offers)
        for host, why in ans.refused:
            reasons.setdefault(host, why)

    def rank(o: Offer) -> int:
        idx = [order.index(n) for n in (o.host, *(n.host for n in o.nodes)) if n in order]
        return min(idx) if idx else len(order)

    offers.sort(key=rank)
    placed = {n.host for o in offers for n in o.nodes} | {o.host for o in offers}
    skipped = [(n, reasons[n]) for n in names if n in reasons and n not in placed]
    now = [o for o in offers if o.starts_now]
    waiting = [o for o in offers if not o.starts_now]
    if now:
        return Solution(now, None, skipped)
    if waiting:
        return Solution([], max(waiting, key=lambda o: o.free), skipped)
    down = [n for n in names if reasons.get(n, "").startswith("unreachable")]
    if req.host is not None and down and len(names) == 1:  # "nothing fits" would blame the request
        raise NoPlacementError(f"host {req.host} is {reasons[req.host]}", [])
    if down and len(down) == len(names):
        raise NoPlacementError("no host can be reached; hosts now:", skipped)
    raise NoPlacementError(f"nothing fits {req.describe()}; hosts now:", skipped)
