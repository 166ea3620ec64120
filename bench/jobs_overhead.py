"""BaseTrainer steps/s vs a hand-written jitted loop on the same model, data and optimizer.

    uv run python bench/jobs_overhead.py [--chunk 50] [--rounds 10]

Both loops run on JAX CPU in this process, compiled before timing, both donating their state
buffers. They take turns of `chunk` steps (the order flipped every round) so that the shared
machine's drifting load hits both alike; the ratio is of total times. Target: ratio ≥ 0.97.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)

import jax
import jax.numpy as jnp
import optax

from tcl.jobs.config import configuration
from tcl.jobs.gpt import GPTTrainer
from tcl.jobs.run import load_config
from tcl.jobs.spec import ExecutionSpec

OVERRIDES = [
    "architecture/block_size=64",
    "architecture/n_layers=2",
    "architecture/d_model=64",
    "architecture/n_heads=4",
    "training/per_device_batch_size=16",
    "data/max_bytes=500000",
    "logging/report_interval=50",
    "logging/validation_interval=0",
    "logging/checkpoint_interval=0",
    "logging/checkpoint_at_end=false",
]


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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--chunk", type=int, default=50, help="steps per turn")
    p.add_argument("--rounds", type=int, default=10)
    a = p.parse_args()
    full, _ = load_config("gpt/train", None, OVERRIDES)
    ours = base = 0.0
    with tempfile.TemporaryDirectory() as root, configuration(full):
        trainer = GPTTrainer(ExecutionSpec.local(root, "bench"))
        trainer_seconds(trainer, 10)  # compile
        hand = HandLoop(trainer)
        # Alternate short turns (order flipped each round) so drifting load hits both alike.
        for r in range(a.rounds):
            if r % 2:
                ours += trainer_seconds(trainer, a.chunk)
            base += hand.seconds(a.chunk)
            if not r % 2:
                ours += trainer_seconds(trainer, a.chunk)
    steps = a.chunk * a.rounds
    print(f"hand-written jitted loop: {steps / base:8.1f} steps/s over {steps} steps")
    print(f"BaseTrainer:              {steps / ours:8.1f} steps/s over {steps} steps")
    print(f"ratio BaseTrainer / hand loop = {base / ours:.3f}  (target >= 0.97)")


if __name__ == "__main__":
    main()
