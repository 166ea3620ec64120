"""BaseTrainer steps/s vs a hand-written jitted loop on the same model, data and optimizer.

    uv run python bench/jobs_overhead.py [--chunk 50] [--rounds 10]

Both loops run on JAX CPU in this process, compiled before timing, both donating their state
buffers. They take turns of `chunk` steps (the order flipped every round) so that the shared
machine's drifting load hits both alike; the ratio is of total times. Target: ratio ≥ 0.97.
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)


from bench._jobslib import HandLoop, take_turns, trainer_seconds
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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--chunk", type=int, default=50, help="steps per turn")
    p.add_argument("--rounds", type=int, default=10)
    a = p.parse_args()
    full, _ = load_config("gpt/train", None, OVERRIDES)
    with tempfile.TemporaryDirectory() as root, configuration(full):
        trainer = GPTTrainer(ExecutionSpec.local(root, "bench"))
        trainer_seconds(trainer, 10)  # compile
        hand = HandLoop(trainer)
        ours, base = take_turns(trainer, hand, a.chunk, a.rounds)
    steps = a.chunk * a.rounds
    print(f"hand-written jitted loop: {steps / base:8.1f} steps/s over {steps} steps")
    print(f"BaseTrainer:              {steps / ours:8.1f} steps/s over {steps} steps")
    print(f"ratio BaseTrainer / hand loop = {base / ours:.3f}  (target >= 0.97)")


if __name__ == "__main__":
    main()
