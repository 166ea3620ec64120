"""BaseTrainer steps/s vs a hand-written jitted loop on the same model, data and optimizer.

    uv run python bench/jobs_overhead.py [--steps 200] [--repeats 5]

Both loops run on JAX CPU in this process, compiled before timing, both donating their state
buffers; the median of `repeats` runs (alternating which goes first: the machine is shared) is
kept for each. Target: ratio ≥ 0.97.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import statistics
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                      "intra_op_parallelism_threads=1")

import jax
import jax.numpy as jnp
import optax

from tcl.jobs.config import configuration
from tcl.jobs.gpt import GPTTrainer
from tcl.jobs.run import load_config
from tcl.jobs.spec import ExecutionSpec

OVERRIDES = [
    "architecture/block_size=64", "architecture/n_layers=2", "architecture/d_model=64",
    "architecture/n_heads=4", "training/per_device_batch_size=16", "data/max_bytes=500000",
    "logging/report_interval=50", "logging/validation_interval=0",
    "logging/checkpoint_interval=0", "logging/checkpoint_at_end=false",
]


def trainer_steps_per_s(trainer: GPTTrainer, steps: int) -> float:
    start_step = trainer.global_step_counter_
    trainer.args = dataclasses.replace(trainer.args, total_steps=start_step + steps)
    t0 = time.perf_counter()
    trainer.run()
    jax.block_until_ready(trainer.state.params)
    return steps / (time.perf_counter() - t0)


def hand_loop_steps_per_s(trainer: GPTTrainer, steps: int, offset: int) -> float:
    """The minimal loop: same model/params/tx/data, no framework around it."""
    model, tx, data = trainer.model, trainer.tx, trainer.dataset
    params = jax.tree.map(jnp.copy, trainer.state.params)
    opt_state = tx.init(params)
    batch, block = trainer.global_batch, trainer.block_size

    @functools.partial(jax.jit, donate_argnums=(0, 1))
    def step(params, opt_state, tokens):  # type: ignore[no-untyped-def]
        def loss_fn(p):  # type: ignore[no-untyped-def]
            logits = model.apply({"params": p}, tokens[:, :-1])
            return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    for _ in range(2):  # the second call can recompile (committed outputs as inputs)
        params, opt_state, loss = step(params, opt_state, jax.device_put(data.batch(0, batch,
                                                                                     block)))
    jax.block_until_ready(loss)
    t0 = time.perf_counter()
    for i in range(steps):
        tokens = jax.device_put(data.batch(offset + i, batch, block))
        params, opt_state, loss = step(params, opt_state, tokens)
    jax.block_until_ready(loss)
    return steps / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=5)
    a = p.parse_args()
    full, _ = load_config("gpt/train", None, OVERRIDES)
    with tempfile.TemporaryDirectory() as root, configuration(full):
        trainer = GPTTrainer(ExecutionSpec.local(root, "bench"))
        trainer_steps_per_s(trainer, 10)  # compile
        ours, base = [], []
        for r in range(a.repeats):  # alternate the order: the machine's load drifts
            if r % 2:
                ours.append(trainer_steps_per_s(trainer, a.steps))
            base.append(hand_loop_steps_per_s(trainer, a.steps, offset=r * a.steps))
            if not r % 2:
                ours.append(trainer_steps_per_s(trainer, a.steps))
    best_ours, best_base = statistics.median(ours), statistics.median(base)
    print(f"hand-written jitted loop: {best_base:8.1f} steps/s median (runs: "
          f"{', '.join(f'{x:.1f}' for x in base)})")
    print(f"BaseTrainer:              {best_ours:8.1f} steps/s median (runs: "
          f"{', '.join(f'{x:.1f}' for x in ours)})")
    print(f"ratio BaseTrainer / hand loop = {best_ours / best_base:.3f}  (target >= 0.97)")


if __name__ == "__main__":
    main()
