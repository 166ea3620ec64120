"""A tiny trainer config shared by the integration tests (real JAX on CPU)."""

from __future__ import annotations

from pathlib import Path

TINY_YAML = """\
job: gpt/train
architecture: {block_size: 32, n_layers: 2, d_model: 32, n_heads: 2}
training: {per_device_batch_size: 8, total_steps: 40, lr: 0.003, warmup_steps: 5}
logging: {report_interval: 1, validation_interval: 0, checkpoint_interval: 20}
data: {max_bytes: 300000}
"""


def write_tiny(tmp: Path) -> Path:
    path = tmp / "tiny.yaml"
    path.write_text(TINY_YAML)
    return path


def resumable_gpt_yaml(total_steps: int) -> str:
    """A tiny trainer that checkpoints every 10 steps: room to stop it after a checkpoint and
    see it resume (the preemption tests of SLURM, TPU pods and JuiceFS clusters)."""
    return f"""\
job: gpt/train
architecture: {{block_size: 32, n_layers: 2, d_model: 32, n_heads: 2}}
training: {{per_device_batch_size: 4, total_steps: {total_steps}, lr: 0.003, warmup_steps: 5}}
logging: {{report_interval: 5, validation_interval: 0, checkpoint_interval: 10}}
data: {{max_bytes: 100000}}
"""
