"""Decoding with the KV cache: greedy is deterministic and equals a no-cache forward pass."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from tcl.jobs.gpt import GPTSample, GPTTrainer
from tcl.jobs.inference import InferenceJob, encode
from tcl.jobs.quick import quick
from tcl.jobs.run import run_job


def _no_cache_greedy(trainer: GPTTrainer, prompt: list[int], n: int) -> list[int]:
    """Reference: re-run the full sequence (no cache) through the model for every new token.

    The sequence is right-padded to block_size so one compiled forward serves every length;
    causal attention makes the logits at position len-1 independent of the padding after it.
    """
    size = trainer.block_size
    forward = jax.jit(lambda p, x: trainer.model.apply({"params": p}, x))
    seq = list(prompt)
    for _ in range(n):
        logits = forward(trainer.state.params, jnp.asarray([seq + [0] * (size - len(seq))]))
        seq.append(int(jnp.argmax(logits[0, len(seq) - 1])))
    return seq[len(prompt) :]


def test_greedy_rollout_is_deterministic_and_matches_no_cache(
    straight: tuple[Path, Path, GPTTrainer],
) -> None:
    trainer = straight[2]
    job = GPTSample.from_trainer(trainer)
    prompts = [encode("def main("), encode("import o"), encode("x")]  # ragged: left padding
    first = job.rollout(prompts, max_new_tokens=12, return_type="output_indices")
    assert first == job.rollout(prompts, max_new_tokens=12, return_type="output_indices")
    for prompt, got in zip(prompts, first, strict=True):
        assert got == _no_cache_greedy(trainer, prompt, 12)


def test_temperature_sampling_follows_the_key(straight: tuple[Path, Path, GPTTrainer]) -> None:
    job = GPTSample.from_trainer(straight[2])
    a = job.rollout(["def "], max_new_tokens=16, temperature=1.0, key=jax.random.key(1))
    b = job.rollout(["def "], max_new_tokens=16, temperature=1.0, key=jax.random.key(1))
    c = job.rollout(["def "], max_new_tokens=16, temperature=1.0, key=jax.random.key(2))
    assert a == b and a != c
    assert isinstance(a[0], str)


def test_pad_left_pads() -> None:
    tokens, mask = InferenceJob.pad([[1, 2], [3]], pad_token=0, pad_to=3)
    np.testing.assert_array_equal(tokens, [[0, 1, 2], [0, 0, 3]])
    np.testing.assert_array_equal(mask, [[False, True, True], [False, False, True]])


def test_sample_job_restores_a_trainer_checkpoint(
    straight: tuple[Path, Path, GPTTrainer], tmp_path: Path
) -> None:
    out, _config, trainer = straight
    cfg = tmp_path / "sample.yaml"
    cfg.write_text("sample: {prompts: ['def ', 'class '], max_new_tokens: 8}\n")
    job = run_job(
        "gpt/sample", cfg, out, restore=f"{trainer.spec.scope}/step_00000040", name="sample"
    )
    assert isinstance(job, GPTSample)
    assert job.model.cfg.d_model == 32  # the architecture came from the checkpoint
    samples = json.loads((job.spec.results_dir / "samples.json").read_text())
    expected = GPTSample.from_trainer(trainer).rollout(
        ["def ", "class "], max_new_tokens=8, return_type="output_decoded"
    )
    assert [s["sample"] for s in samples] == expected


def test_quick_configures_and_restores(straight: tuple[Path, Path, GPTTrainer]) -> None:
    out, _config, trainer = straight
    with quick("gpt/train", "quick-run", out_path=out) as j:
        j.config.training.total_steps = 42
        j.config.logging.checkpoint_interval = 0
        try:
            j.config.training.lrr = 1.0
        except Exception as e:  # struct mode: a typo'd key fails at assignment
            assert "lrr" in str(e)
        else:
            raise AssertionError("a typo'd key was accepted")
        j.restore(f"{trainer.spec.scope}/step_00000040")
        job = j()
    assert isinstance(job, GPTTrainer)
    assert job.model.cfg.d_model == 32 and job.global_step_counter_ == 42
    assert GPTTrainer.latest(job.spec) == "step_00000042"


def test_cached_logits_equal_no_cache_logits_with_left_padding(
    straight: tuple[Path, Path, GPTTrainer],
) -> None:
    """Prefill a left-padded batch into the KV cache, decode one token, and compare every real
    position's logits with a plain forward pass over the unpadded sequence."""
    trainer = straight[2]
    model, params = trainer.model, trainer.state.params
    prompts = [encode("def main("), encode("x = 1")]
    tokens, mask = InferenceJob.pad(prompts)
    pos = np.maximum(np.cumsum(mask, axis=1) - 1, 0)
    logits, upd = model.apply(
        {"params": params},
        jnp.asarray(tokens),
        jnp.asarray(pos),
        jnp.asarray(mask),
        decode=True,
        mutable=["cache"],
    )
    nxt = np.asarray([[7], [9]], np.int32)
    step_logits, _ = model.apply(
        {"params": params, "cache": upd["cache"]},
        jnp.asarray(nxt),
        jnp.asarray(pos[:, -1:] + 1),
        jnp.ones((2, 1), bool),
        decode=True,
        mutable=["cache"],
    )
    for row, prompt in enumerate(prompts):
        full = model.apply({"params": params}, jnp.asarray([[*prompt, int(nxt[row, 0])]]))[0]
        real = np.asarray(logits[row])[mask[row]]
        np.testing.assert_allclose(real, np.asarray(full[:-1]), atol=1e-4, rtol=1e-4)
        np.testing.assert_allclose(
            np.asarray(step_logits[row, 0]), np.asarray(full[-1]), atol=1e-4, rtol=1e-4
        )


def test_plain_causal_attention_equals_the_masked_path(
    straight: tuple[Path, Path, GPTTrainer],
) -> None:
    """A batch without positions or padding takes ``is_causal`` attention (no mask tensor); the
    same batch with its positions and validity spelled out takes the mask: same logits."""
    trainer = straight[2]
    model, params = trainer.model, trainer.state.params
    tokens = jnp.asarray([encode("def main(): return 1"), encode("import os, sys as s_")])
    B, T = tokens.shape
    plain = model.apply({"params": params}, tokens)
    spelled = model.apply(
        {"params": params},
        tokens,
        jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T)),
        jnp.ones((B, T), bool),
    )
    np.testing.assert_allclose(np.asarray(plain), np.asarray(spelled), atol=1e-5, rtol=1e-5)
