"""A real tiny training run on JAX CPU: it learns, checkpoints restore bit-identically, and
training on from a restore matches training straight through, step for step."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np

from tcl.jobs.gpt import GPTTrainer
from tcl.jobs.metrics import read_metrics
from tcl.jobs.run import load_config, make_job, run_job
from tcl.jobs.spec import ExecutionSpec

from .helpers import write_tiny

Straight = tuple[Path, Path, GPTTrainer]


def _losses(job: GPTTrainer) -> dict[int, float]:
    rows = read_metrics(job.spec.logs_dir / "metrics.jsonl")
    return {r["step"]: r["loss"] for r in rows if r["kind"] == "train"}


def _assert_trees_equal(a: Any, b: Any) -> None:
    ta: object  # a PyTreeDef: jaxlib has no stub for it, so mypy cannot compare two as such
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_loss_falls(straight: Straight) -> None:
    losses = _losses(straight[2])
    first = np.mean([losses[s] for s in range(1, 4)])
    last = np.mean([losses[s] for s in range(38, 41)])
    assert first > 5.0  # ~ln(256): untrained bytes
    assert last < first - 1.5, (first, last)


def test_restore_is_bit_identical(straight: Straight) -> None:
    out, config, job = straight
    assert GPTTrainer.latest(job.spec) == "step_00000040"
    full, explicit = load_config("gpt/train", config)
    spec = ExecutionSpec.local(out, "restored")
    rel = f"{job.spec.scope}/step_00000040"
    restored, _ = make_job("gpt/train", spec, full, explicit, restore=rel)
    assert isinstance(restored, GPTTrainer)
    assert restored.global_step_counter_ == 40
    assert int(restored.state.step) == 40
    _assert_trees_equal(restored.state.params, job.state.params)
    _assert_trees_equal(restored.state.opt_state, job.state.opt_state)
    np.testing.assert_array_equal(
        jax.random.key_data(restored.rng_key), jax.random.key_data(job.rng_key)
    )
    assert restored.restored_from == {**job.spec.to_json(), "job": "gpt/train", "path": rel}


def test_training_on_from_a_restore_matches_straight_through(straight: Straight) -> None:
    out, config, job = straight
    rel = f"{job.spec.scope}/step_00000020"
    resumed = run_job("gpt/train", config, out, restore=rel, name="resumed")
    assert isinstance(resumed, GPTTrainer)
    a, b = _losses(job), _losses(resumed)
    assert sorted(b) == list(range(21, 41))
    assert [b[s] for s in range(21, 41)] == [a[s] for s in range(21, 41)]
    _assert_trees_equal(resumed.state.params, job.state.params)


def test_restore_merges_runtime_config_over_the_saved_one(straight: Straight) -> None:
    # The saved run has d_model 32; the defaults say 64. Runtime config (no YAML, one override)
    # must only change what it names.
    out, _config, job = straight
    full, explicit = load_config("gpt/train", None, ["training/total_steps=41"])
    spec = ExecutionSpec.local(out, "merged")
    restored, cfg = make_job(
        "gpt/train", spec, full, explicit, restore=f"{job.spec.scope}/step_00000040"
    )
    assert isinstance(restored, GPTTrainer)
    assert restored.model.cfg.d_model == 32
    assert restored.args.total_steps == 41
    assert cfg.training.per_device_batch_size == 8


def test_grad_accumulation_matches_one_big_batch(tmp_path: Path) -> None:
    config = write_tiny(tmp_path)
    common = [
        "training/total_steps=2",
        "logging/checkpoint_at_end=false",
        "logging/checkpoint_interval=0",
    ]
    one = run_job("gpt/train", config, tmp_path, overrides=common, name="one")
    four = run_job(
        "gpt/train",
        config,
        tmp_path,
        name="four",
        overrides=[*common, "training/grad_accum_steps=4"],
    )
    assert isinstance(one, GPTTrainer) and isinstance(four, GPTTrainer)
    la, lb = _losses(one), _losses(four)
    np.testing.assert_allclose([la[1], la[2]], [lb[1], lb[2]], rtol=1e-5)
    for x, y in zip(
        jax.tree.leaves(one.state.params), jax.tree.leaves(four.state.params), strict=True
    ):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-6)
