"""Network mode choice for a task (docker executor; the process executor is always host)."""

from __future__ import annotations

from tcl.shim.api import NetworkMode


def choose_network(requested: NetworkMode, *, multinode: bool, whole_host: bool) -> NetworkMode:
    """``auto``: a task taking the whole host or part of a multi-node job gets the host network
    (no NAT, any port for collectives); a task sharing the host gets a bridge, so tasks never
    clash on ports. An explicit ``host``/``bridge`` is honoured as given."""
    if requested is not NetworkMode.AUTO:
        return requested
    return NetworkMode.HOST if (multinode or whole_host) else NetworkMode.BRIDGE


def is_whole_host(allocated: int, total: int, request_all: bool) -> bool:
    return request_all or (total > 0 and allocated == total)
