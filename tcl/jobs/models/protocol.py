"""What BaseTrainer and InferenceJob need of a model (seed 001's `MODEL`), read off the module.

A model is a Flax module whose settings are config fields (`hidden: int =
field("architecture/hidden", default=32)`, or a nested config dataclass); `configure(MODEL)`
builds it from the active config. The built-in GPT (`tcl.jobs.models.transformer.Transformer`)
is one such module. Beyond that, everything is optional and looked up by name:

- `__call__(tokens_BT, ...)` returns logits [B, T, V], or `(logits, loss)` as theseus' models
  do. Keyword parameters it declares are passed when it has them: `targets` (the model computes
  its own loss), `padding_mask` or `valid_BT` (True = a real token), `deterministic`. A model
  that also takes `pos_BT` and `decode` follows tcl's KV-cache protocol (see `decode.py`).
- `block_size`: tokens per sequence; else the config's `architecture/block_size`.
- `sharding`: its logical axis rules, `[(logical name, mesh axis or None), ...]` (enums are
  read by `.value`); else `tcl.jobs.sharding.RULES`.
- `flops_per_token(n_params)` for MFU; else 6·N.
- `check_mesh(model_axis)`: raise ConfigError naming a config key when a size does not divide
  by the `model` mesh axis; params that do not divide are reported by path in any case.
"""

from __future__ import annotations

import enum
import functools
import inspect
from collections.abc import Sequence
from typing import Any

import jax
from omegaconf import DictConfig

from tcl.jobs.config import current_config
from tcl.jobs.errors import ConfigError
from tcl.jobs.sharding import RULES

Rules = tuple[tuple[str, Any], ...]


def call_parameters(cls: type) -> frozenset[str]:
    """The parameter names of the module's `__call__`."""
    return _call_parameters(cls)


@functools.cache
def _call_parameters(cls: Any) -> frozenset[str]:
    try:
        return frozenset(inspect.signature(cls.__call__).parameters)
    except (TypeError, ValueError):
        return frozenset()


def call_kwargs(
    model: Any,
    *,
    targets: jax.Array | None = None,
    valid_BT: jax.Array | None = None,
    deterministic: bool | None = None,
) -> dict[str, Any]:
    """The keyword arguments `model.__call__` takes among those given."""
    params = call_parameters(type(model))
    kwargs: dict[str, Any] = {}
    if targets is not None and "targets" in params:
        kwargs["targets"] = targets
    if valid_BT is not None:
        for name in ("padding_mask", "valid_BT"):
            if name in params:
                kwargs[name] = valid_BT
                break
    if deterministic is not None and "deterministic" in params:
        kwargs["deterministic"] = deterministic
    return kwargs


def split_output(out: Any) -> tuple[jax.Array, jax.Array | None]:
    """(logits, loss or None) from what the model returned."""
    if isinstance(out, tuple | list):
        logits = out[0]
        loss = out[1] if len(out) > 1 else None
        return logits, loss
    return out, None


def supports_kv_cache(model: Any) -> bool:
    params = call_parameters(type(model))
    return {"pos_BT", "valid_BT", "decode"} <= params


def block_size_of(model: Any, cfg: DictConfig | None = None) -> int:
    size = getattr(model, "block_size", None)
    if size is None:
        tree = cfg if cfg is not None else current_config()
        size = tree.get("architecture", {}).get("block_size")
    if not isinstance(size, int) or size < 1:
        raise ConfigError(
            f"{type(model).__name__} has no block_size and the config sets none",
            key="architecture/block_size",
        )
    return size


def _axis(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


def sharding_rules(model: Any) -> Rules:
    rules = getattr(model, "sharding", None)
    if rules is None:
        return RULES
    return tuple((str(_axis(name)), _axis(axis)) for name, axis in rules)


def flops_per_token(model: Any, n_params: int) -> float:
    fn = getattr(model, "flops_per_token", None)
    return float(fn(n_params)) if callable(fn) else 6.0 * n_params


def check_mesh(model: Any, params_sharding: Any, params_shape: Any, model_axis: int) -> None:
    """Every param dimension a mesh axis splits must divide by that axis' size."""
    hook = getattr(model, "check_mesh", None)
    if callable(hook):
        hook(model_axis)
    leaves = jax.tree_util.tree_leaves_with_path(params_shape)
    shardings = jax.tree.leaves(params_sharding)
    for (path, leaf), sharding in zip(leaves, shardings, strict=True):
        spec = getattr(sharding, "spec", ())
        mesh = getattr(sharding, "mesh", None)
        mesh_shape: dict[str, int] = dict(mesh.shape) if mesh is not None else {}
        for dim, axes in zip(leaf.shape, spec, strict=False):
            names: Sequence[str] = (axes,) if isinstance(axes, str) else (axes or ())
            size = 1
            for name in names:
                size *= mesh_shape.get(name, 1)
            if dim % size:
                raise ConfigError(
                    f"param {jax.tree_util.keystr(path)} has a dimension of {dim}, "
                    f"not divisible by the mesh axes {'x'.join(names)} ({size})",
                    key="mesh/model_parallel",
                )
