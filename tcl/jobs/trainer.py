"""BaseTrainer: the training loop (AdamW + warmup/cosine, grad accumulation, mesh sharding,
periodic checkpoint/validation/report, JSON-lines metrics) for any MODEL that follows
`tcl.jobs.models.protocol` (a Flax module whose settings are config fields)."""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from jax.experimental import multihost_utils

from tcl.jobs import mark
from tcl.jobs.config import configure, field
from tcl.jobs.data import DataConfig, TokenDataset, make_dataset
from tcl.jobs.errors import ConfigError, JobPreempted
from tcl.jobs.job import RestoreableJob
from tcl.jobs.metrics import MetricsWriter, peak_flops_per_device
from tcl.jobs.models import protocol
from tcl.jobs.models.transformer import param_count
from tcl.jobs.sharding import (
    MeshConfig,
    batch_sharding,
    logical_shardings,
    make_mesh,
    replicated,
)
from tcl.jobs.spec import ExecutionSpec
from tcl.runner.metricline import Phase

log = logging.getLogger("tcl.jobs.trainer")
C = TypeVar("C", bound="TrainerConfig")
M = TypeVar("M", bound=nn.Module)
TrainState = train_state.TrainState


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
    # -1: the launcher searches for the largest size that fits (see tcl.jobs.batchsize).
    per_device_batch_size: int = field("training/per_device_batch_size", default=8)
    grad_accum_steps: int = field("training/grad_accum_steps", default=1)
    total_steps: int = field("training/total_steps", default=200)
    lr: float = field("training/lr", default=3e-3)
    warmup_steps: int = field("training/warmup_steps", default=20)
    min_lr_ratio: float = field("training/min_lr_ratio", default=0.1)
    weight_decay: float = field("training/weight_decay", default=0.1)
    grad_clip: float = field("training/grad_clip", default=1.0)
    seed: int = field("training/seed", default=0)
    report_interval: int = field("logging/report_interval", default=10)
    validation_interval: int = field("logging/validation_interval", default=100)
    validation_batches: int = field("logging/validation_batches", default=4)
    checkpoint_interval: int = field("logging/checkpoint_interval", default=100)
    checkpoint_at_end: bool = field("logging/checkpoint_at_end", default=True)
    keep_checkpoints: int = field("logging/keep_checkpoints", default=3)
    save_best: bool = field("logging/save_best", default=False)  # "best" (never `latest`)
    peak_flops_per_device: float | None = field("logging/peak_flops_per_device", default=None)


def step_suffix(step: int) -> str:
    return f"step_{step:08d}"


class BaseTrainer(RestoreableJob[C], Generic[C, M]):
    """Trains MODEL on a TokenDataset; subclasses set MODEL (and CONFIG, schedule() if needed).

    MODEL is any Flax module whose settings are config fields (`models.protocol`); its fields
    join the job's config, and `configure(MODEL)` builds it."""

    MODEL: ClassVar[type[nn.Module]]
    CONFIG: ClassVar[type] = TrainerConfig
    COOPERATIVE_STOP: ClassVar[bool] = True  # polls stop_event each step, checkpoints, stops

    @classmethod
    def config(cls) -> list[type]:
        return [cls.CONFIG, cls.MODEL, DataConfig, MeshConfig]

    def __init__(self, spec: ExecutionSpec) -> None:
        super().__init__(spec)
        a = self.args
        self.model: M = configure(self.MODEL)  # type: ignore[assignment]
        self.rules = protocol.sharding_rules(self.model)
        self.data_cfg = configure(DataConfig)
        self.mesh = make_mesh(configure(MeshConfig).model_parallel)
        if a.per_device_batch_size < 1:
            raise ConfigError(
                "must be ≥ 1 here (-1 is resolved by the launcher)",
                key="training/per_device_batch_size",
            )
        self.replicas = self.mesh.shape["data"]
        self.local_replicas = self.replicas // jax.process_count()
        self.per_device_batch_size = a.per_device_batch_size
        self.global_batch = a.per_device_batch_size * self.replicas
        self.block_size = protocol.block_size_of(self.model)
        self.dataset: TokenDataset = self.make_dataset()
        vocab = getattr(self.model, "vocab_size", None)
        if isinstance(vocab, int) and vocab < self.dataset.vocab_size:
            raise ConfigError(
                f"{vocab} is smaller than the dataset's {self.dataset.vocab_size} tokens",
                key="architecture/vocab_size",
            )
        self.key = jax.random.key(a.seed)
        self.tx = optax.chain(
            optax.clip_by_global_norm(a.grad_clip),
            optax.adamw(self.schedule(), b1=0.9, b2=0.95, weight_decay=a.weight_decay),
        )
        self.state, self.state_sharding = self._init_state()
        self.global_step_counter_ = 0
        self.best_val_score_ = float("-inf")
        self._train_step = self._compile_train_step()
        self._eval_step = jax.jit(self._loss_only)
        self.n_params = param_count(self.state.params)

    @property
    def rng_key(self) -> jax.Array:
        assert self.key is not None
        return self.key

    # -- hooks a subclass may override ----------------------------------------------------

    def schedule(self) -> optax.Schedule:
        a = self.args
        warmup = min(a.warmup_steps, max(a.total_steps - 1, 0))
        return optax.warmup_cosine_decay_schedule(
            0.0, a.lr, warmup, max(a.total_steps, warmup + 1), a.lr * a.min_lr_ratio
        )

    def make_dataset(self) -> TokenDataset:
        return make_dataset(self.data_cfg)

    def loss(self, params: Any, tokens_BT1: jax.Array, key: jax.Array) -> jax.Array:
        """Mean next-token loss of one micro-batch (dropout on): the model's own loss when it
        returns `(logits, loss)` for `targets`, else cross-entropy of its logits."""
        return self._forward_loss(params, tokens_BT1, key, deterministic=False)

    def _forward_loss(
        self, params: Any, tokens_BT1: jax.Array, key: jax.Array, deterministic: bool
    ) -> jax.Array:
        x_BT, y_BT = tokens_BT1[:, :-1], tokens_BT1[:, 1:]
        kwargs = protocol.call_kwargs(self.model, targets=y_BT, deterministic=deterministic)
        out = self.model.apply({"params": params}, x_BT, rngs={"dropout": key}, **kwargs)
        logits, loss = protocol.split_output(out)
        if loss is None:
            losses = optax.softmax_cross_entropy_with_integer_labels(logits, y_BT)
            loss = losses.mean()
        return loss

    # -- setup ----------------------------------------------------------------------------

    def _init_state(self) -> tuple[TrainState, Any]:
        dummy = jnp.zeros((1, self.block_size), jnp.int32)

        def init_boxed(key: jax.Array) -> TrainState:
            params = self.model.init(key, dummy)["params"]
            state: TrainState = TrainState.create(
                apply_fn=self.model.apply, params=params, tx=self.tx
            )
            return state

        init_key = jax.random.fold_in(self.rng_key, 0x1217)
        abstract = jax.eval_shape(init_boxed, init_key)
        shardings = logical_shardings(abstract, self.mesh, self.rules)
        protocol.check_mesh(
            self.model, shardings.params, nn.meta.unbox(abstract.params), self.mesh.shape["model"]
        )
        init = jax.jit(lambda k: nn.meta.unbox(init_boxed(k)), out_shardings=shardings)
        state = init(init_key)  # born sharded (out_shardings); no mesh context needed
        return state, shardings

    def _loss_only(self, params: Any, tokens: jax.Array) -> jax.Array:
        return self._forward_loss(params, tokens, jax.random.key(0), deterministic=True)

    def _compile_train_step(self) -> Any:
        accum = self.args.grad_accum_steps
        if self.per_device_batch_size % accum:
            raise ConfigError(
                f"per_device_batch_size {self.per_device_batch_size} is not "
                f"divisible by grad_accum_steps {accum}",
                key="training/grad_accum_steps",
            )
        grad_fn = jax.value_and_grad(self.loss)

        def train_step(
            state: TrainState, tokens_ABT1: jax.Array, base_key: jax.Array
        ) -> tuple[TrainState, dict[str, jax.Array]]:
            # The step's key is derived on device: no extra host dispatch per step.
            key = jax.random.fold_in(base_key, state.step)
            if accum == 1:
                loss, grads = grad_fn(state.params, tokens_ABT1[0], key)
            else:

                def micro(carry: Any, xs: Any) -> Any:
                    tokens, i = xs
                    loss_i, grads_i = grad_fn(state.params, tokens, jax.random.fold_in(key, i))
                    return jax.tree.map(jnp.add, carry, (loss_i, grads_i)), None

                zeros = (jnp.zeros((), jnp.float32), jax.tree.map(jnp.zeros_like, state.params))
                (loss, grads), _ = jax.lax.scan(micro, zeros, (tokens_ABT1, jnp.arange(accum)))
                loss, grads = jax.tree.map(lambda x: x / accum, (loss, grads))
            new_state = state.apply_gradients(grads=grads)
            return new_state, {"loss": loss, "grad_norm": optax.tree.norm(grads)}

        self.batch_sharding = batch_sharding(self.mesh, 3, batch_axis=1)
        return jax.jit(
            train_step,
            in_shardings=(self.state_sharding, self.batch_sharding, None),
            out_shardings=(self.state_sharding, replicated(self.mesh)),
            donate_argnums=0,
        )

    # -- data -----------------------------------------------------------------------------

    def batch(self, step: int, split: str = "train") -> jax.Array:
        """The device batch for `step`: tokens [accum, global_batch / accum, T + 1]."""
        accum = self.args.grad_accum_steps if split == "train" else 1
        local = self.global_batch // jax.process_count()
        tokens = self.dataset.batch(step, local, self.block_size, split, jax.process_index())
        tokens = tokens.reshape(accum, local // accum, self.block_size + 1)
        if jax.process_count() == 1:  # the fast path: one host holds the whole batch
            placed: jax.Array = jax.device_put(tokens, self.batch_sharding)
            return placed
        out: jax.Array = jax.make_array_from_process_local_data(self.batch_sharding, tokens)
        return out

    # -- checkpoints ----------------------------------------------------------------------

    def save(self, suffix: str, register: bool = True) -> None:
        self.save_tree_and_metadata(
            suffix, self.state, {"steps": self.global_step_counter_, "score": self.best_val_score_}
        )
        if register:
            self.register(suffix)
            self._prune()

    def _prune(self) -> None:
        keep = self.args.keep_checkpoints
        if keep <= 0 or not self.main_process():
            return
        steps = sorted(s for s in self.checkpoints(self.spec) if s.startswith("step_"))
        latest = self.latest(self.spec)
        for suffix in steps[:-keep]:
            if suffix != latest:
                shutil.rmtree(self._get_checkpoint_path(self.spec, suffix), ignore_errors=True)

    def restore_from_path(self, rel_path: str | Path) -> None:
        old_state = self.state
        state, metadata = self.get_tree_and_metadata_from_path(rel_path, old_state)
        self.state = state
        jax.tree.map(lambda x: x.delete() if isinstance(x, jax.Array) else None, old_state)
        self.global_step_counter_ = int(metadata.get("steps", 0))
        self.best_val_score_ = float(metadata.get("score", float("-inf")))
        if self.main_process():
            log.info("restored step %d from %s", self.global_step_counter_, rel_path)

    # -- the loop -------------------------------------------------------------------------

    def evaluate(self) -> float:
        losses = [
            self._eval_step(self.state.params, self.batch(i, "val")[0])
            for i in range(self.args.validation_batches)
        ]
        return float(np.mean(jax.device_get(losses)))

    def run(self) -> None:
        a = self.args
        writer = MetricsWriter(self.spec.logs_dir / "metrics.jsonl", self.main_process())
        peak = peak_flops_per_device(a.peak_flops_per_device)
        flops_tok = protocol.flops_per_token(self.model, self.n_params)
        tokens_per_step = self.global_batch * self.block_size
        schedule = self.schedule()
        pending: list[dict[str, jax.Array]] = []
        t_last, step_last = time.perf_counter(), self.global_step_counter_
        first_done = False
        try:
            with jax.set_mesh(self.mesh), nn.logical_axis_rules(self.rules):
                self._compile_first(a.total_steps)
                while self.global_step_counter_ < a.total_steps:
                    if self._stop_agreed(self.global_step_counter_):
                        suffix = step_suffix(self.global_step_counter_)
                        if self.registered() != suffix:
                            self.save(suffix)
                        raise JobPreempted(suffix)
                    step = self.global_step_counter_
                    self.state, metrics = self._train_step(
                        self.state, self.batch(step), self.rng_key
                    )
                    pending.append(metrics)
                    if not first_done:  # the attempt's first step: its time-to-first-step
                        jax.block_until_ready(metrics)
                        mark(Phase.FIRST_STEP)
                        first_done = True
                    self.global_step_counter_ = step = step + 1
                    if step % a.report_interval == 0 or step == a.total_steps:
                        fetched = jax.device_get(pending)
                        pending = []
                        now = time.perf_counter()
                        tps = tokens_per_step * (step - step_last) / max(now - t_last, 1e-9)
                        t_last, step_last = now, step
                        writer.write(
                            {
                                "kind": "train",
                                "step": step,
                                "loss": float(np.mean([m["loss"] for m in fetched])),
                                "grad_norm": float(fetched[-1]["grad_norm"]),
                                "lr": float(schedule(step - 1)),
                                "tokens_per_s": round(tps, 1),
                                "mfu": (
                                    flops_tok * tps / (peak * jax.device_count()) if peak else None
                                ),
                            }
                        )
                    if a.validation_interval and step % a.validation_interval == 0:
                        self._validate(writer, step)
                    if a.checkpoint_interval and step % a.checkpoint_interval == 0:
                        self.save(step_suffix(step))
                if a.checkpoint_at_end and self.registered() != step_suffix(
                    self.global_step_counter_
                ):
                    self.save(step_suffix(self.global_step_counter_))
        finally:
            writer.close()

    def _compile_first(self, total_steps: int) -> None:
        """The train step compiled ahead of the first step (the jitted function's own call
        then finds it), so an attempt's time-to-first-step shows its compile apart: a resumed
        attempt that finds its program in JAX's persistent cache compiles in a fraction."""
        mark(Phase.STATE_READY)
        step = self.global_step_counter_
        if step >= total_steps:
            return
        lowered = self._train_step.lower(self.state, self.batch(step), self.rng_key)
        mark(Phase.TRACED)  # what JAX's cache cannot save: tracing, lowering (its key)
        lowered.compile()
        mark(Phase.COMPILED)

    def _stop_agreed(self, step: int) -> bool:
        """Whether to checkpoint and stop before `step`. A save is collective, so in a
        multi-process job every process stops at the same step: at report steps (where the host
        waits for the device anyway), when any process was asked to."""
        if jax.process_count() == 1:
            return self.stop_requested()
        if step % self.args.report_interval != 0:
            return False
        asked = multihost_utils.process_allgather(np.int32(self.stop_requested()))
        return bool(np.any(asked))

    def _validate(self, writer: MetricsWriter, step: int) -> None:
        val_loss = self.evaluate()
        writer.write({"kind": "val", "step": step, "val_loss": val_loss})
        if -val_loss > self.best_val_score_:
            self.best_val_score_ = -val_loss
            if self.args.save_best:
                self.save("best", register=False)
