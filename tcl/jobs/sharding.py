"""The device mesh (axes `data`, `model`) and the logical → mesh sharding rules."""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import numpy as np
from flax.linen import spmd
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from tcl.jobs.config import field
from tcl.jobs.errors import ConfigError

# Logical axis names used by tcl.jobs.models → mesh axes.
RULES: tuple[tuple[str, str | None], ...] = (
    ("batch", "data"),
    ("length", None),
    ("embed", None),
    ("heads", "model"),
    ("kv", None),
    ("mlp", "model"),
    ("vocab", "model"),
)


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    model_parallel: int = field("mesh/model_parallel", default=1)  # size of the `model` axis


def make_mesh(model_parallel: int = 1, devices: list[Any] | None = None) -> Mesh:
    devs = devices if devices is not None else jax.devices()
    if model_parallel < 1 or len(devs) % model_parallel:
        raise ConfigError(
            f"{len(devs)} devices cannot be split into a model axis of {model_parallel}",
            key="mesh/model_parallel",
        )
    grid = np.array(devs).reshape(len(devs) // model_parallel, model_parallel)
    return Mesh(grid, ("data", "model"))


def logical_shardings(abstract_boxed: Any, mesh: Mesh, rules: Any = RULES) -> Any:
    """NamedShardings for a pytree whose leaves carry logical partitioning metadata."""
    spec = nn.get_partition_spec(abstract_boxed)
    return spmd.logical_to_mesh_sharding(spec, mesh, rules)


def batch_sharding(mesh: Mesh, ndim: int, batch_axis: int = 0) -> NamedSharding:
    axes: list[str | None] = [None] * ndim
    axes[batch_axis] = "data"
    return NamedSharding(mesh, PartitionSpec(*axes))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())
