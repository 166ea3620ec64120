"""InferenceJob: restore a trained model from a checkpoint and work with it (rollout, forward).

MODEL is any model `tcl.jobs.models.protocol` describes (a Flax module whose settings are config
fields); the built-in GPT is one. The default `restore_from_path` is seed 001's example: the
model from `configure(MODEL)` under the checkpoint's config, a template state for shapes, the
state sharding from the model's logical rules, then only the params (and step) of the saved
state are read, so the trainer's optimizer state stays on disk.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, Self, TypeVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

from tcl.jobs import decode, text
from tcl.jobs.config import configure, current_config
from tcl.jobs.errors import CheckpointError, ConfigError
from tcl.jobs.job import RestoreableJob
from tcl.jobs.models import protocol
from tcl.jobs.sharding import MeshConfig, make_mesh
from tcl.jobs.spec import ExecutionSpec
from tcl.jobs.trainer import BaseTrainer

log = logging.getLogger("tcl.jobs.inference")
C = TypeVar("C")
M = TypeVar("M", bound=nn.Module)
ReturnType = Literal["decoded", "indices", "output_decoded", "output_indices"]


def encode(s: str) -> list[int]:
    return text.ByteEncoding().encode(s)


def decode_bytes(tokens: Sequence[int]) -> str:
    return text.ByteEncoding().decode(tokens)


class InferenceJob(RestoreableJob[C], Generic[C, M]):
    """Read-only work on a trained checkpoint; always started with a restore (or built from a
    live trainer with `from_trainer`)."""

    MODEL: ClassVar[type[nn.Module]]
    NEEDS_RESTORE: ClassVar[bool] = True

    model: nn.Module
    mesh: jax.sharding.Mesh
    state_sharding: Any
    block_size: int
    replicas: int
    local_replicas: int
    per_device_batch_size: int
    steps: int = 0
    _state: train_state.TrainState | None = None
    _source: Any = None  # the trainer whose state this job reads (from_trainer)

    @classmethod
    def config_classes(cls) -> list[type]:
        classes = super().config_classes()
        return classes if MeshConfig in classes else [*classes, MeshConfig]

    def __init__(self, spec: ExecutionSpec) -> None:
        super().__init__(spec)
        self.mesh = make_mesh(configure(MeshConfig).model_parallel)
        self.replicas = self.mesh.shape["data"]
        self.local_replicas = max(self.replicas // jax.process_count(), 1)
        training = current_config().get("training") or {}
        self.per_device_batch_size = int(training.get("per_device_batch_size", 1) or 1)

    @property
    def state(self) -> train_state.TrainState:
        """The model state: the live trainer's (by reference) after `from_trainer`."""
        if self._source is not None:
            source_state: train_state.TrainState = self._source.state
            return source_state
        if self._state is None:
            raise CheckpointError(
                f"{type(self).__name__} has no model state: it runs on a trained checkpoint "
                "(give --restore PATH; list them with: tcl checkpoints)"
            )
        return self._state

    @state.setter
    def state(self, value: train_state.TrainState) -> None:
        self._source = None
        self._state = value

    # -- restore ----------------------------------------------------------------------------

    def get_tree_and_metadata_from_path(
        self, rel_path: str | Path, template_tree: Any, partial: bool = True
    ) -> tuple[Any, dict[str, Any]]:
        """Read what `template_tree` names of the checkpoint (a subset by default: an inference
        template has no optimizer state)."""
        return super().get_tree_and_metadata_from_path(rel_path, template_tree, partial)

    @staticmethod
    def _init_template_state(model: nn.Module, block_size: int) -> train_state.TrainState:
        """An abstract (shape-only) state of `model`, its params still carrying their logical
        partitioning, so `nn.get_partition_spec` of it gives the state sharding."""
        dummy = jnp.zeros((1, block_size), jnp.int32)

        def init(key: jax.Array) -> train_state.TrainState:
            params = model.init(key, dummy)["params"]
            state: train_state.TrainState = train_state.TrainState.create(
                apply_fn=model.apply, params=params, tx=optax.identity()
            )
            return state

        abstract: train_state.TrainState = jax.eval_shape(init, jax.random.key(0))
        return abstract

    def restore_from_path(self, rel_path: str | Path) -> None:
        self.model = configure(self.MODEL)
        self.block_size = protocol.block_size_of(self.model)
        template_state = self._init_template_state(self.model, self.block_size)
        self.state_sharding = nn.logical_to_mesh_sharding(  # type: ignore[attr-defined]
            nn.get_partition_spec(template_state),
            self.mesh,
            rules=protocol.sharding_rules(self.model),
        )
        template = jax.tree.map(
            lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
            nn.meta.unbox(template_state.params),
            self.state_sharding.params,
        )
        tree, metadata = self.get_tree_and_metadata_from_path(rel_path, {"params": template})
        self.state = train_state.TrainState.create(
            apply_fn=self.model.apply, params=tree["params"], tx=optax.identity()
        )
        self.steps = int(metadata.get("steps", metadata.get("step", 0)))
        if self.main_process():
            log.info("restored params at step %d from %s", self.steps, rel_path)

    @classmethod
    def from_trainer(cls, trainer: BaseTrainer[Any, Any]) -> Self:
        """An inference job sharing a live trainer's state by reference (no __init__): it sees
        every step the trainer takes after this."""
        job = object.__new__(cls)
        job.spec = trainer.spec
        job.stop_event = trainer.stop_event
        job.key = trainer.key
        job._source = trainer
        job.model = trainer.model
        job.mesh = trainer.mesh
        job.state_sharding = trainer.state_sharding
        job.block_size = trainer.block_size
        job.replicas = trainer.replicas
        job.local_replicas = trainer.local_replicas
        job.per_device_batch_size = trainer.per_device_batch_size
        job.steps = trainer.global_step_counter_
        return job

    # -- forward and rollout ----------------------------------------------------------------

    @staticmethod
    def forward(
        state: train_state.TrainState,
        params: Any,
        batch: tuple[Any, ...],
        key: jax.Array | None = None,
        deterministic: bool = True,
        mutable: bool | list[str] | tuple[str, ...] = False,
        extra_variables: dict[str, Any] | None = None,
    ) -> Any:
        """The model's output for `batch` = (x, y, padding_mask) (y and the mask may be None;
        they are passed when the model takes them); dropout from `key` unless
        `deterministic`; with `mutable` (e.g. ["cache"]), also the updated variables."""
        x, y, mask = batch
        variables = {"params": params, **(extra_variables or {})}
        model = getattr(state.apply_fn, "__self__", None)
        kwargs: dict[str, Any] = (
            protocol.call_kwargs(model, targets=y, valid_BT=mask, deterministic=deterministic)
            if model is not None
            else {}
        )
        if key is not None and not deterministic:
            kwargs["rngs"] = {"dropout": key}
        if mutable:
            kwargs["mutable"] = list(mutable) if not isinstance(mutable, bool) else mutable
        return state.apply_fn(variables, x, **kwargs)

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
        inputs: Sequence[Any],
        encoding: Any = None,
        max_new_tokens: int | None = None,
        max_prompt_length: int | None = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
        key: jax.Array | None = None,
        return_type: ReturnType = "decoded",
    ) -> list[Any]:
        """Generate after each input: raw strings, chat templates (lists of turns with `role`
        and `message`) or token-id lists, encoded with `encoding` (default: UTF-8 bytes).

        `max_new_tokens` defaults to half the block; prompts are left-padded to
        `max_prompt_length` (default: the longest). Greedy when `temperature` is 0, else
        sampled from `key` (nucleus `top_p`). `return_type`: "decoded" (prompt + continuation
        as text, seed 001's default), "indices" (the same as ids), "output_decoded",
        "output_indices" (the continuation only).
        """
        enc = encoding if encoding is not None else text.ByteEncoding()
        seqs = [text.to_tokens(item, enc) for item in inputs]
        if not seqs or min(len(s) for s in seqs) == 0:
            raise ConfigError("every rollout input needs at least one token")
        n_new = max_new_tokens if max_new_tokens is not None else self.block_size // 2
        tokens, mask = self.pad(seqs, pad_to=max_prompt_length)
        if max_prompt_length is not None and tokens.shape[1] > max_prompt_length:
            raise ConfigError(
                f"an input has {tokens.shape[1]} tokens, over max_prompt_length {max_prompt_length}"
            )
        if n_new < 1 or tokens.shape[1] + n_new > self.block_size:
            raise ConfigError(
                f"prompt ({tokens.shape[1]}) + max_new_tokens ({n_new}) must fit in "
                f"block_size {self.block_size}",
                key="architecture/block_size",
            )
        key = key if key is not None else jax.random.key(0)
        generate = (
            decode.generate_cached
            if protocol.supports_kv_cache(self.model)
            else decode.generate_uncached
        )
        rules = protocol.sharding_rules(self.model)
        with jax.set_mesh(self.mesh), nn.logical_axis_rules(rules):
            out = generate(
                self.model,
                self.state.params,
                jnp.asarray(tokens),
                jnp.asarray(mask),
                key,
                n_new,
                float(temperature),
                float(top_p),
            )
        new = np.asarray(jax.device_get(out)).tolist()
        rows = (
            new
            if return_type.startswith("output")
            else [[*s, *n] for s, n in zip(seqs, new, strict=True)]
        )
        if return_type.endswith("indices"):
            return rows
        return [text.decode_tokens(enc, row) for row in rows]
