"""Shared by the tcl.jobs benchmarks and bench/gpucheck (not a benchmark itself)."""

from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from tcl.jobs.data import DataConfig, TokenDataset, register_dataset
from tcl.jobs.gpt import GPTTrainer


class RandomTokens:
    vocab_size = 50304

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def batch(
        self, step: int, batch_size: int, seq_len: int, split: str = "train", shard: int = 0
    ) -> np.ndarray:
        rng = np.random.default_rng([self.seed, step, shard])
        out: np.ndarray = rng.integers(
            0, self.vocab_size, (batch_size, seq_len + 1), dtype=np.int32
        )
        return out


@register_dataset("random_tokens")
def _random_tokens(cfg: DataConfig) -> TokenDataset:
    return RandomTokens(cfg.seed)


def trainer_seconds(trainer: GPTTrainer, steps: int) -> float:
    start_step = trainer.global_step_counter_
    trainer.args = dataclasses.replace(trainer.args, total_steps=start_step + steps)
    t0 = time.perf_counter()
    trainer.run()
    jax.block_until_ready(trainer.state.params)
    return time.perf_counter() - t0


class HandLoop:
    """The minimal loop: same model/params/tx/data, no framework around it."""

    def __init__(self, trainer: GPTTrainer) -> None:
        model, tx = trainer.model, trainer.tx
        self.data, self.batch, self.block = (
            trainer.dataset,
            trainer.global_batch,
            trainer.block_size,
        )
        self.params = jax.tree.map(jnp.copy, trainer.state.params)
        self.opt_state = tx.init(self.params)
        self.i = 0

        @functools.partial(jax.jit, donate_argnums=(0, 1))
        def step(params, opt_state, tokens):  # type: ignore[no-untyped-def]
            def loss_fn(p):  # type: ignore[no-untyped-def]
                logits = model.apply({"params": p}, tokens[:, :-1])
                return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

            loss, grads = jax.value_and_grad(loss_fn)(params)
            updates, opt_state = tx.update(grads, opt_state, params)
            return optax.apply_updates(params, updates), opt_state, loss

        self.step = step
        self.seconds(2)  # compile; the second call can recompile (committed inputs)

    def seconds(self, steps: int) -> float:
        t0 = time.perf_counter()
        loss = None
        for _ in range(steps):
            tokens = jax.device_put(self.data.batch(self.i, self.batch, self.block))
            self.params, self.opt_state, loss = self.step(self.params, self.opt_state, tokens)
            self.i += 1
        jax.block_until_ready(loss)
        return time.perf_counter() - t0


def take_turns(trainer: GPTTrainer, hand: HandLoop, chunk: int, rounds: int) -> tuple[float, float]:
    """(trainer seconds, hand-loop seconds) over ``rounds`` turns of ``chunk`` steps each, the
    order flipped every round so that drifting load (or clocks) hits both alike."""
    ours = base = 0.0
    for r in range(rounds):
        if r % 2:
            ours += trainer_seconds(trainer, chunk)
        base += hand.seconds(chunk)
        if not r % 2:
            ours += trainer_seconds(trainer, chunk)
    return ours, base
