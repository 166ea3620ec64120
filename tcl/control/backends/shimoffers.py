"""What hosts with shims can place: from each shim's ``/api/host`` (pure functions).

One host takes a request that fits its free accelerators; a request for more chips than one
node has (or for several nodes) goes to hosts of one ``cluster``, ``ceil(chips / per node)`` of
them, each taking an equal share.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

from tcl.control.backends.base import NodeOffer, Offer, Offers
from tcl.control.solver import Request
from tcl.shim.api import HostInfo


def offer_text(info: HostInfo) -> str:
    """What a host offers now, e.g. ``h100: 6 of 8 free``."""
    if not info.accelerators:
        return f"no accelerators ({info.cpus} CPUs)"
    total = Counter(a.chip for a in info.accelerators)
    free = Counter(a.chip for a in info.accelerators if a.task_id is None and not a.busy_outside)
    return ", ".join(f"{chip}: {free[chip]} of {n} free" for chip, n in sorted(total.items()))


def free_chips(info: HostInfo, chip: str | None) -> tuple[int, ...]:
    return tuple(
        a.index
        for a in info.accelerators
        if a.task_id is None and not a.busy_outside and (chip is None or a.chip == chip)
    )


def node_size(info: HostInfo, chip: str | None) -> int:
    return sum(1 for a in info.accelerators if chip is None or a.chip == chip)


def shim_offers(
    kind: str,
    req: Request,
    infos: Mapping[str, HostInfo | str],
    clusters: Mapping[str, str | None],
) -> Offers:
    """Offers from what each host reported (a string: why it could not be asked)."""
    out = Offers()
    for name, info in infos.items():
        if isinstance(info, str):
            out.refused.append((name, info))
            continue
        single = req.nodes <= 1 and (req.chips == 0 or node_size(info, req.chip) >= req.chips)
        free = free_chips(info, req.chip) if req.chips else ()
        if single and len(free) >= req.chips:
            out.offers.append(
                Offer(
                    backend=kind,
                    host=name,
                    nodes=(NodeOffer(name, free),),
                    chip=req.chip,
                    chips_per_node=req.chips,
                    free=len(free),
                )
            )
        else:
            out.refused.append((name, offer_text(info)))
    out.offers.extend(_group_offers(kind, req, infos, clusters))
    return out


def _group_offers(
    kind: str,
    req: Request,
    infos: Mapping[str, HostInfo | str],
    clusters: Mapping[str, str | None],
) -> list[Offer]:
    """Multi-node offers: hosts of one ``cluster`` whose nodes can each take a share."""
    members_of: dict[str, list[HostInfo]] = {}
    names: dict[str, list[str]] = {}
    for name, info in infos.items():
        cluster = clusters.get(name)
        if cluster is not None and isinstance(info, HostInfo):
            members_of.setdefault(cluster, []).append(info)
            names.setdefault(cluster, []).append(name)
    out = []
    for cluster, members in members_of.items():
        per_node = min(node_size(m, req.chip) for m in members) if req.chips else 0
        if req.nodes > 1:
            nodes = req.nodes
        elif req.chips and per_node and req.chips > per_node:
            nodes = math.ceil(req.chips / per_node)
        else:
            continue  # one node suffices: the single-host offers cover it
        chips_per_node = math.ceil(req.chips / nodes) if req.chips else 0
        if req.chips and chips_per_node > per_node:
            continue
        fits: list[NodeOffer] = []
        for name, info in zip(names[cluster], members, strict=True):
            free = free_chips(info, req.chip) if req.chips else ()
            if len(free) >= chips_per_node and len(fits) < nodes:
                fits.append(NodeOffer(name, free))
        if len(fits) == nodes:
            out.append(
                Offer(
                    backend=kind,
                    host=cluster,
                    nodes=tuple(fits),
                    chip=req.chip,
                    chips_per_node=chips_per_node,
                    free=sum(len(n.free) for n in fits),
                )
            )
    return out
