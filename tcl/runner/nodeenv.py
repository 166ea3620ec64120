"""The environment a multi-node job sees: the variable names the runner exports and ``tcl.jobs``
reads, and the count of GPUs a process may use.

No imports beyond the standard library: ``tcl.jobs.distributed`` imports this module inside the
job, where (in a user's image) only the ``tcl`` package is on the path, none of the runner's
dependencies.
"""

from __future__ import annotations

from collections.abc import Mapping

# tcl's own contract (docs/multinode.md). One job process per node.
NODES = "TCL_NODES"  # how many processes (nodes) the job has
NODE_RANK = "TCL_NODE_RANK"  # this process's rank, 0 .. TCL_NODES-1; 0 hosts the coordinator
COORDINATOR = "TCL_COORDINATOR"  # "host:port" of rank 0's coordinator service
ATTEMPT = "TCL_ATTEMPT"  # 0 for the first run, raised by each retry or requeue

# What ``jax.distributed.initialize`` itself reads (jax/_src/distributed.py). JAX has no variable
# for the process count or id: those are passed as arguments (``tcl.jobs.distributed``).
JAX_COORDINATOR_ADDRESS = "JAX_COORDINATOR_ADDRESS"
JAX_LOCAL_DEVICE_IDS = "JAX_LOCAL_DEVICE_IDS"

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


def visible_gpu_count(env: Mapping[str, str]) -> int | None:
    """How many GPUs ``CUDA_VISIBLE_DEVICES`` lets this process see; None when it is unset.

    CUDA numbers the devices it lets through 0..n-1 whatever their host indices (``4,5`` are
    devices 0 and 1), and stops at the first entry that names no device (``-1``, SLURM's
    ``NoDevFiles``): so does this count."""
    value = env.get(CUDA_VISIBLE_DEVICES)
    if value is None:
        return None
    count = 0
    for entry in value.split(","):
        entry = entry.strip()
        if not ((entry.isascii() and entry.isdigit()) or entry.startswith(("GPU-", "MIG-"))):
            break
        count += 1
    return count


# jax's convention under SLURM: the coordinator listens on 61440 + (a job number % 4096)
COORDINATOR_PORT_BASE = 61440
COORDINATOR_PORT_SPAN = 4096
