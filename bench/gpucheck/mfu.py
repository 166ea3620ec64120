"""Row 3, MFU: the ``tcl.jobs`` trainer on a GPT sized for the card, in bf16, against a
hand-written jitted loop on the same model, parameters, optimizer and data.

Both are compiled before timing; then they take turns of `chunk` steps, the order flipped each
round, so drifting clocks hit both alike. Tokens/s is measured around the trainer's own steps;
achieved FLOP/s is the model's FLOPs per token (``protocol.flops_per_token``: 6·N plus the
attention term) times tokens/s per device; MFU is that over the chip's dense bf16 peak
(``tcl.jobs.metrics.PEAK_BF16_FLOPS``). The trainer's own ``mfu`` metric is reported beside it.
Goals: MFU ≥ 45 % on an H100/H200; trainer/hand-loop ≥ 0.97.

On the CPU (``JAX_PLATFORMS=cpu``) a tiny GPT runs the same code: tokens/s and the ratio are
measured, MFU is not (no peak is known for a CPU).

    python -m bench.gpucheck.mfu
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import tempfile
from typing import Any

import jax

from bench._jobslib import HandLoop, take_turns, trainer_seconds
from bench.gpucheck.report import Outcome, RowResult, run_row
from tcl.jobs.config import configuration
from tcl.jobs.gpt import GPTTrainer
from tcl.jobs.metrics import peak_flops_per_device, read_metrics
from tcl.jobs.models import protocol
from tcl.jobs.run import load_config
from tcl.jobs.spec import ExecutionSpec

MFU_GOAL = 0.45
OVERHEAD_GOAL = 0.97
GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Size:
    label: str
    arch: dict[str, Any]
    batch: int  # per device
    chunk: int  # steps per turn
    rounds: int


TINY = Size(
    "tiny (CPU)",
    {"block_size": 64, "n_layers": 2, "d_model": 64, "n_heads": 4, "vocab_size": 512},
    batch=8,
    chunk=10,
    rounds=2,
)


def gpt(block: int, layers: int, d_model: int, heads: int) -> dict[str, Any]:
    return {
        "block_size": block,
        "n_layers": layers,
        "d_model": d_model,
        "n_heads": heads,
        "vocab_size": 50304,
        "dtype": "bfloat16",
    }


def size_for(memory_bytes: int | None) -> Size:
    """A GPT that keeps a big card's matrix units busy and fits what JAX may allocate."""
    if memory_bytes is None:
        return TINY
    if memory_bytes >= 90 * GIB:  # H200 (JAX takes 75 % of 141 GB)
        return Size("GPT 0.7B, seq 2048", gpt(2048, 12, 2048, 16), batch=16, chunk=10, rounds=4)
    if memory_bytes >= 45 * GIB:  # H100 80 GB, A100 80 GB
        return Size("GPT 0.7B, seq 2048", gpt(2048, 12, 2048, 16), batch=8, chunk=10, rounds=4)
    return Size("GPT 124M, seq 1024", gpt(1024, 12, 768, 12), batch=8, chunk=10, rounds=4)


def device_memory() -> int | None:
    d = jax.devices()[0]
    if d.platform == "cpu":
        return None
    stats = d.memory_stats() or {}
    limit = stats.get("bytes_limit")
    return int(limit) if limit else None


def overrides(size: Size, attention: str | None) -> list[str]:
    arch = {**size.arch}
    if size is not TINY:
        arch["attention_impl"] = attention or "null"
    return [
        *(f"architecture/{k}={v}" for k, v in arch.items()),
        "data/dataset=random_tokens",
        f"training/per_device_batch_size={size.batch}",
        "training/total_steps=3",
        f"logging/report_interval={size.chunk}",
        "logging/validation_interval=0",
        "logging/checkpoint_interval=0",
        "logging/checkpoint_at_end=false",
    ]


def measure(size: Size, attention: str | None, root: str) -> dict[str, Any]:
    full, _ = load_config("gpt/train", None, overrides(size, attention))
    with configuration(full):
        trainer = GPTTrainer(ExecutionSpec.local(root, "gpucheck-mfu"))
        trainer_seconds(trainer, 3)  # compile and warm up
        hand = HandLoop(trainer)
        ours, base = take_turns(trainer, hand, size.chunk, size.rounds)
        steps = size.chunk * size.rounds
        tokens_per_s = steps * trainer.global_batch * trainer.block_size / ours
        flops_per_token = protocol.flops_per_token(trainer.model, trainer.n_params)
        logged = [
            r["mfu"]
            for r in read_metrics(trainer.spec.logs_dir / "metrics.jsonl")
            if r.get("kind") == "train" and r.get("mfu")
        ]
        n_params = trainer.n_params
    devices = jax.device_count()
    achieved = flops_per_token * tokens_per_s / devices
    peak = peak_flops_per_device() if size is not TINY else None
    return {
        "model": size.label,
        "params_m": round(n_params / 1e6, 1),
        "per_device_batch": size.batch,
        "attention": attention or "xla",
        "steps_timed": steps,
        "tokens_per_s": round(tokens_per_s),
        "achieved_tflops": round(achieved / 1e12, 1),
        "peak_tflops": round(peak / 1e12) if peak else None,
        "mfu": round(achieved / peak, 4) if peak else None,
        "trainer_logged_mfu": round(statistics.median(logged[1:] or logged), 4)
        if logged and peak
        else None,
        "hand_steps_per_s": round(steps / base, 3),
        "trainer_steps_per_s": round(steps / ours, 3),
        "overhead_ratio": round(base / ours, 4),
    }


def check() -> RowResult:
    size = size_for(device_memory())
    tried: list[str] = []
    figures: dict[str, Any] | None = None
    attentions: list[str | None] = [None] if size is TINY else ["cudnn", None]
    for attention in attentions:
        try:
            with tempfile.TemporaryDirectory(prefix="tcl-gpucheck-mfu-") as root:
                figures = measure(size, attention, root)
            break
        except Exception as e:
            if attention is None:
                raise
            first = (str(e).strip().splitlines() or [""])[0][:200]
            tried.append(f"attention {attention} failed ({type(e).__name__}: {first})")
    assert figures is not None
    figures["fallbacks"] = tried
    f = figures
    ratio = f"trainer/hand loop {f['overhead_ratio']:.3f} (goal ≥ {OVERHEAD_GOAL})"
    if f["mfu"] is None:
        summary = (
            f"{f['model']} {f['params_m']}M on {jax.devices()[0].device_kind}: "
            f"{f['tokens_per_s']:,} tokens/s, MFU not measured (no peak for this chip); {ratio}"
        )
        met = True
    else:
        summary = (
            f"{f['model']} ({f['params_m']}M, batch {f['per_device_batch']}/device, "
            f"{f['attention']} attention): {f['tokens_per_s']:,} tokens/s, "
            f"{f['achieved_tflops']} TFLOP/s of {f['peak_tflops']}, MFU {f['mfu']:.1%} "
            f"(goal ≥ {MFU_GOAL:.0%}; trainer's own metric {f['trainer_logged_mfu']}); {ratio}"
        )
        met = f["mfu"] >= MFU_GOAL
    if tried:
        summary += "; " + "; ".join(tried)
    met = met and f["overhead_ratio"] >= OVERHEAD_GOAL
    return RowResult("mfu", Outcome.OK if met else Outcome.BELOW_GOAL, summary, figures)


if __name__ == "__main__":
    sys.exit(run_row("mfu", check))
