"""MFU of BaseTrainer on a ~125M-parameter GPT, sequence 1024, bf16 (needs a GPU or TPU).

    uv run python bench/jobs_mfu.py [--batch 16] [--steps 60] [--attention cudnn]
    uv run python bench/jobs_mfu.py --smoke      # tiny CPU run that checks the script works

MFU = (6·N + 12·L·T·D) · tokens/s / (devices · dense bf16 peak), the trainer's own `mfu`
metric (tcl.jobs.metrics.PEAK_BF16_FLOPS: H100/H200 989 TFLOP/s). The median over reports after
the first (compile) is printed, as a ratio against the 45% target. Data are random tokens
(vocab 50304, GPT-2 sized) so the input pipeline is not what is measured.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile

import jax

from bench._jobslib import RandomTokens  # noqa: F401  (registers data/dataset=random_tokens)
from tcl.jobs.config import configuration
from tcl.jobs.gpt import GPTTrainer
from tcl.jobs.metrics import read_metrics
from tcl.jobs.run import load_config
from tcl.jobs.spec import ExecutionSpec


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=16, help="per-device batch size")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--attention", default="cudnn", help="cudnn | xla")
    p.add_argument("--remat", action="store_true")
    p.add_argument("--smoke", action="store_true", help="tiny model on CPU, no MFU target")
    a = p.parse_args()
    backend = jax.default_backend()
    if backend == "cpu" and not a.smoke:
        print("jobs_mfu: no GPU/TPU here (backend cpu); run it on an H100/H200, or --smoke")
        return 0
    arch = (
        [
            "architecture/block_size=64",
            "architecture/n_layers=2",
            "architecture/d_model=64",
            "architecture/n_heads=4",
            "architecture/vocab_size=50304",
            "architecture/attention_impl=null",
            "logging/peak_flops_per_device=1e11",
        ]
        if a.smoke
        else [
            "architecture/block_size=1024",
            "architecture/n_layers=12",
            "architecture/d_model=768",
            "architecture/n_heads=12",
            "architecture/vocab_size=50304",
            "architecture/dtype=bfloat16",
            f"architecture/attention_impl={'null' if a.attention == 'xla' else a.attention}",
            f"architecture/remat={str(a.remat).lower()}",
        ]
    )
    overrides = [
        *arch,
        "data/dataset=random_tokens",
        f"training/per_device_batch_size={a.batch}",
        f"training/total_steps={a.steps}",
        "logging/report_interval=10",
        "logging/validation_interval=0",
        "logging/checkpoint_interval=0",
        "logging/checkpoint_at_end=false",
    ]
    full, _ = load_config("gpt/train", None, overrides)
    with tempfile.TemporaryDirectory() as root, configuration(full):
        trainer = GPTTrainer(ExecutionSpec.local(root, "mfu"))
        trainer.run()
        rows = [
            r for r in read_metrics(trainer.spec.logs_dir / "metrics.jsonl") if r["kind"] == "train"
        ][1:]
    n = trainer.n_params
    mfu = statistics.median(r["mfu"] for r in rows) if rows and rows[0]["mfu"] else None
    tps = statistics.median(r["tokens_per_s"] for r in rows)
    print(
        f"device {jax.devices()[0].device_kind} x{jax.device_count()}, params {n / 1e6:.1f}M, "
        f"seq {trainer.block_size}, batch/device {a.batch}, {tps:,.0f} tokens/s"
    )
    if mfu is None:
        print("MFU: unknown peak for this chip")
        return 1
    if a.smoke:
        print(f"MFU {mfu:.1%} (smoke run: the peak is a made-up 1e11 FLOP/s; not a result)")
        return 0
    print(f"MFU {mfu:.1%}  ratio to target 45%: {mfu / 0.45:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
