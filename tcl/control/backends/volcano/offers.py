"""What a volcano host can take: the request's shape in pods, and the free GPUs of its queue.

``nodes = ceil(chips / chips_per_node)`` (the host's ``chips:`` for the chip asked, else
``gpus_per_node``). With ``check_availability``, the queue's status says what is free:
``deserved`` (else ``capability``) less ``allocated``, for the host's GPU resource key; a Job that
does not fit is still accepted, queued by Volcano with that reason (as a SLURM job would be).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Any

from tcl.control.backends.base import NodeOffer, Offer
from tcl.control.backends.volcano.kube import KubeClient
from tcl.control.config import VolcanoHost
from tcl.control.errors import TclError
from tcl.control.solver import Request


def shape(cfg: VolcanoHost, req: Request) -> tuple[int, int] | str:
    """(pods, GPUs per pod) for ``req``, or why this host cannot take it."""
    if not req.chips:
        return (req.nodes or cfg.num_nodes), 0
    per_node = cfg.chips.get(req.chip) if req.chip else None
    if per_node is None and (req.chip is None or not cfg.chips):
        per_node = cfg.gpus_per_node or (max(cfg.chips.values()) if cfg.chips else None)
    if not per_node:
        have = ", ".join(cfg.chips) or "none configured"
        return f"no {req.chip or 'GPU'} here (chips: {have})"
    nodes = req.nodes or math.ceil(req.chips / per_node)
    chips = math.ceil(req.chips / nodes)
    if chips > per_node:
        return f"{req.chips} chips on {nodes} pods is over {per_node} per pod"
    return nodes, chips


async def queue_free(kube: KubeClient, cfg: VolcanoHost) -> tuple[int, int] | str:
    """(free, capacity) GPUs of the host's queue, or why it cannot be used."""
    queue = cfg.queue or "default"
    body = await asyncio.to_thread(kube.get_queue, queue)
    if body is None:
        return f"Volcano queue {queue} not found"
    key = cfg.gpu_resource_key
    spec, status = body.get("spec") or {}, body.get("status") or {}
    if (status.get("state") or "Open") != "Open":
        return f"Volcano queue {queue} is {status.get('state')}"
    capacity = quantity((spec.get("deserved") or spec.get("capability") or {}).get(key))
    allocated = quantity((status.get("allocated") or {}).get(key))
    return max(0, capacity - allocated), capacity


def quantity(value: Any) -> int:
    """A GPU count as Kubernetes writes quantities ("8", 8, "8000m")."""
    if value is None:
        return 0
    text = str(value)
    if text.endswith("m"):
        return int(float(text[:-1]) / 1000)
    return int(float(text))


FreeOf = Callable[[str, VolcanoHost, str], Awaitable[tuple[int, int] | str]]


async def host_offer(
    name: str,
    cfg: VolcanoHost,
    req: Request,
    namespace: str,
    image: str | None,
    free_of: FreeOf,
) -> Offer | str:
    """What host ``name`` offers for ``req`` (its queue's room asked with ``free_of`` when it
    checks availability), or why it cannot take it."""
    got_shape = shape(cfg, req)
    if isinstance(got_shape, str):
        return got_shape
    nodes, per_node = got_shape
    starts_now, reason, free = True, "", 0
    if cfg.check_availability and per_node:
        try:
            got = await free_of(name, cfg, namespace)
        except TclError as e:
            return str(e).splitlines()[0]
        if isinstance(got, str):
            return got
        free, capacity = got
        need = nodes * per_node
        starts_now = free >= need
        if not starts_now:
            reason = (
                f"queue {cfg.queue or 'default'}: {free} of {capacity} "
                f"{cfg.gpu_resource_key} free, {need} needed"
            )
    params = {"namespace": namespace}
    if image:
        params["image"] = image
    return Offer(
        backend=cfg.type,  # the table key (tcl.control.backends.table) is the config type
        host=name,
        nodes=tuple(NodeOffer(name) for _ in range(nodes)),
        chip=req.chip if per_node else None,
        chips_per_node=per_node,
        starts_now=starts_now,
        queue_reason=reason,
        free=free,
        params=params,
    )
