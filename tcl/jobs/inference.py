"""InferenceJob: restore a trained model from a checkpoint and decode with a KV cache."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, Self, TypeVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

from tcl.jobs.config import configure, current_config
from tcl.jobs.errors import ConfigError
from tcl.jobs.job import RestoreableJob
from tcl.jobs.models.config import ModelConfig
from tcl.jobs.sharding import RULES, MeshConfig, logical_shardings, make_mesh
from tcl.jobs.trainer import BaseTrainer, compute_dtype

log = logging.getLogger("tcl.jobs.inference")
C = TypeVar("C")
M = TypeVar("M", bound=nn.Module)


def encode(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def decode(tokens: Sequence[int]) -> str:
    return bytes(int(t) for t in tokens).decode("utf-8", errors="replace")


class InferenceJob(RestoreableJob[C], Generic[C, M]):
    """Read-only work on a trained checkpoint; always started with a restore."""

    MODEL: ClassVar[type[nn.Module]]

    model: nn.Module
    model_cfg: ModelConfig
    state: train_state.TrainState
    mesh: jax.sharding.Mesh
    state_sharding: Any
    block_size: int

    def restore_from_path(self, rel_path: str | Path) -> None:
        self.model_cfg = configure(ModelConfig)
        self.mesh = make_mesh(configure(MeshConfig).model_parallel)
        self.model = self.MODEL(self.model_cfg, compute_dtype(self.model_cfg.dtype))
        self.block_size = self.model_cfg.block_size
        dummy = jnp.zeros((1, self.block_size), jnp.int32)
        abstract = jax.eval_shape(lambda k: self.model.init(k, dummy)["params"], jax.random.key(0))
        self.state_sharding = logical_shardings(abstract, self.mesh)
        template = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            nn.meta.unbox(abstract),
            self.state_sharding,
        )
        tree, metadata = self.get_tree_and_metadata_from_path(
            rel_path, {"params": template}, partial=True
        )
        self.state = train_state.TrainState.create(
            apply_fn=self.model.apply, params=tree["params"], tx=optax.identity()
        )
        self.replicas = self.mesh.shape["data"]
        self.local_replicas = self.replicas // jax.process_count()
        cfg = current_config()
        self.per_device_batch_size = int(cfg.get("training", {}).get("per_device_batch_size", 1))
        self.steps = int(metadata.get("steps", 0))
        if self.main_process():
            log.info("restored params at step %d from %s", self.steps, rel_path)

    @classmethod
    def from_trainer(cls, trainer: BaseTrainer[Any, Any]) -> Self:
        """An inference job sharing a live trainer's state by reference (no __init__)."""
        job = object.__new__(cls)
        job.spec = trainer.spec
        job.stop_event = trainer.stop_event
        job.key = trainer.key
        job.model = trainer.model
        job.model_cfg = trainer.model_cfg
        job.state = trainer.state
        job.mesh = trainer.mesh
        job.state_sharding = trainer.state_sharding
        job.block_size = trainer.block_size
        job.replicas = trainer.replicas
        job.local_replicas = trainer.replicas // jax.process_count()
        job.per_device_batch_size = trainer.per_device_batch_size
        return job

    @staticmethod
    def forward(
        state: train_state.TrainState,
        params: Any,
        batch: tuple[Any, ...],
        mutable: bool | list[str] = False,
        extra_variables: dict[str, Any] | None = None,
    ) -> Any:
        """Logits for `batch` = (x, y, padding_mask); with `mutable`, also the new variables."""
        x, _y, mask = batch
        variables = {"params": params, **(extra_variables or {})}
        return state.apply_fn(variables, x, valid_BT=mask, mutable=mutable)

    @staticmethod
    def pad(
        seqs: Sequence[Sequence[int]], pad_token: int = 0, pad_to: int | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Left-pad to one length: (tokens [B, L] int32, mask [B, L] bool, True = real)."""
        length = max([len(s) for s in seqs] + [pad_to or 0])
        tokens = np.full((len(seqs), length), pad_token, np.int32)
        mask = np.zeros((len(seqs), length), bool)
        for i, s in enumerate(seqs):
            if s:
                tokens[i, length - len(s) :] = s
                mask[i, length - len(s) :] = True
        return tokens, mask

    def rollout(
        self,
        inputs: Sequence[str] | Sequence[Sequence[int]],
        max_new_tokens: int,
        temperature: float = 0.0,
        key: jax.Array | None = None,
    ) -> list[Any]:
        """Generate `max_new_tokens` after each input (greedy when temperature is 0).

        Strings in → strings out (byte encoding); token lists in → token lists out.
        """
        as_text = all(isinstance(s, str) for s in inputs)
        seqs = [encode(s) if isinstance(s, str) else list(s) for s in inputs]
        if not seqs or min(len(s) for s in seqs) == 0:
            raise ConfigError("every rollout input needs at least one token")
        tokens, mask = self.pad(seqs)
        if tokens.shape[1] + max_new_tokens > self.block_size:
            raise ConfigError(
                f"prompt ({tokens.shape[1]}) + max_new_tokens ({max_new_tokens}) "
                f"exceeds block_size {self.block_size}",
                key="architecture/block_size",
            )
        key = key if key is not None else jax.random.key(0)
        with jax.set_mesh(self.mesh), nn.logical_axis_rules(RULES):
            out = _generate(
                self.model,
                self.state.params,
                jnp.asarray(tokens),
                jnp.asarray(mask),
                key,
                max_new_tokens,
                float(temperature),
            )
        new = np.asarray(jax.device_get(out))
        return [decode(row) if as_text else row.tolist() for row in new]


@functools.partial(jax.jit, static_argnums=(0, 5, 6))
def _generate(
    model: nn.Module,
    params: Any,
    tokens_BP: jax.Array,
    valid_BP: jax.Array,
    key: jax.Array,
    n_new: int,
    temperature: float,
) -> jax.Array:
    """Prefill the cache with the prompt, then decode `n_new` tokens one at a time."""
    pos_BP = jnp.maximum(jnp.cumsum(valid_BP, axis=1) - 1, 0).astype(jnp.int32)

    def pick(logits_BV: jax.Array, k: jax.Array) -> jax.Array:
        if temperature == 0.0:
            return jnp.argmax(logits_BV, axis=-1).astype(jnp.int32)
        return jax.random.categorical(k, logits_BV / temperature).astype(jnp.int32)

    # No "cache" collection yet: the first decode call creates it (empty) and fills the prompt.
    logits, upd = model.apply(
        {"params": params}, tokens_BP, pos_BP, valid_BP, decode=True, mutable=["cache"]
    )
    first = pick(logits[:, -1], jax.random.fold_in(key, 0))

    def body(carry: Any, i: jax.Array) -> Any:
        cache, tok_B, pos_B = carry
        logits, upd = model.apply(
            {"params": params, "cache": cache},
            tok_B[:, None],
            pos_B[:, None],
            jnp.ones_like(tok_B[:, None], bool),
            decode=True,
            mutable=["cache"],
        )
        nxt = pick(logits[:, -1], jax.random.fold_in(key, i))
        return (upd["cache"], nxt, pos_B + 1), tok_B

    _, toks_NB = jax.lax.scan(
        body, (upd["cache"], first, pos_BP[:, -1] + 1), jnp.arange(1, n_new + 1)
    )
    out_BN: jax.Array = toks_NB.T
    return out_BN
