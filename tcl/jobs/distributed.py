"""Join this process to its multi-node JAX job in one call: ``tcl.jobs.distributed.initialize()``.

The runner tells each job process where it sits (``TCL_NODES``, ``TCL_NODE_RANK``,
``TCL_COORDINATOR``; see docs/multinode.md) whatever the scheduler; JAX reads no variable for the
process count or id, so they are passed here as arguments. Call it before anything that touches
a JAX device: the launcher (``python -m tcl.jobs.launch``) does, before the job is built.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from tcl.jobs.errors import DistributedError
from tcl.runner import nodeenv


@dataclass(frozen=True)
class Topology:
    """This process's place in the job. ``joined``: JAX's distributed runtime is up (this call
    or an earlier one started it); False for a single-process job, which needs none."""

    process_id: int
    num_processes: int
    coordinator: str | None
    local_device_ids: tuple[int, ...] | None  # None: every device of the node
    joined: bool

    @property
    def main_process(self) -> bool:
        return self.process_id == 0


def topology_from_env(env: Mapping[str, str] | None = None) -> Topology:
    """Read (and check) the job's place from ``env`` (default ``os.environ``) without touching
    JAX. Unset ``TCL_NODES``: one process. ``DistributedError`` names a missing or bad variable."""
    env = os.environ if env is None else env
    nodes = _whole(env, nodeenv.NODES, 1, default=1)
    if nodes == 1:
        return Topology(0, 1, env.get(nodeenv.COORDINATOR) or None, None, joined=False)
    rank = _whole(env, nodeenv.NODE_RANK, 0, default=None)
    if rank >= nodes:
        raise DistributedError(
            f"${nodeenv.NODE_RANK}={rank} must be below ${nodeenv.NODES}={nodes}"
        )
    coordinator = env.get(nodeenv.COORDINATOR) or env.get(nodeenv.JAX_COORDINATOR_ADDRESS)
    if not coordinator:
        raise DistributedError(
            f"${nodeenv.NODES}={nodes} but neither ${nodeenv.COORDINATOR} nor "
            f"${nodeenv.JAX_COORDINATOR_ADDRESS} says where rank 0's coordinator listens "
            "(host:port)"
        )
    host, _, port = coordinator.rpartition(":")
    if not host or not (port.isascii() and port.isdigit()):
        raise DistributedError(f"coordinator {coordinator!r} is not host:port")
    return Topology(rank, nodes, coordinator, _device_ids(env), joined=False)


def initialize(
    env: Mapping[str, str] | None = None, initialization_timeout_s: int = 300
) -> Topology:
    """With more than one node, ``jax.distributed.initialize`` with this process's coordinator,
    process count and id (and ``JAX_LOCAL_DEVICE_IDS`` when set); a no-op for one node, and
    when JAX's distributed runtime is already up (a second call).

    JAX's cluster auto-detection is turned off: given everything but the device ids, it would
    still run, and under SLURM restrict the process to the GPU numbered ``SLURM_LOCALID``
    (jax-ml/jax#16788); without it every device of the node is used."""
    topology = topology_from_env(env)
    if topology.num_processes == 1:
        return topology
    import jax

    joined = Topology(
        topology.process_id,
        topology.num_processes,
        topology.coordinator,
        topology.local_device_ids,
        joined=True,
    )
    if jax.distributed.is_initialized():
        return joined
    try:
        jax.distributed.initialize(
            coordinator_address=topology.coordinator,
            num_processes=topology.num_processes,
            process_id=topology.process_id,
            local_device_ids=list(topology.local_device_ids) if topology.local_device_ids else None,
            cluster_detection_method="deactivate",
            initialization_timeout=initialization_timeout_s,
        )
    except RuntimeError as e:  # e.g. a JAX computation already ran: too late to join
        raise DistributedError(
            f"cannot join the {topology.num_processes}-process job as process "
            f"{topology.process_id} (coordinator {topology.coordinator}): {e}"
        ) from e
    return joined


def _whole(env: Mapping[str, str], name: str, minimum: int, default: int | None) -> int:
    text = env.get(name, "").strip()
    if not text:
        if default is None:
            raise DistributedError(f"${name} is not set")
        return default
    if not (text.isascii() and text.isdigit()) or int(text) < minimum:
        raise DistributedError(f"${name}={env[name]!r} is not a whole number >= {minimum}")
    return int(text)


def _device_ids(env: Mapping[str, str]) -> tuple[int, ...] | None:
    text = env.get(nodeenv.JAX_LOCAL_DEVICE_IDS, "").strip()
    if not text:
        return None
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isascii() and p.isdigit() for p in parts):
        raise DistributedError(
            f"${nodeenv.JAX_LOCAL_DEVICE_IDS}={text!r} is not a comma-separated list of ids"
        )
    return tuple(int(p) for p in parts)
