"""Seed 001's examples as a theseus user porting them would run them: their jobs live in their
own repo (tests/fixtures/userrepo, a package outside tcl found through `[tool.tcl] jobs`)."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

from tcl.cli.app import app
from tcl.jobs.gpt import GPTTrainer
from tcl.jobs.inference import InferenceJob
from tcl.jobs.job import BasicJob
from tcl.jobs.quick import quick
from tcl.jobs.registry import get_job
from tcl.jobs.run import run_job
from tcl.jobs.trainer import BaseTrainer, TrainerConfig

cli = CliRunner()
Straight = tuple[Path, Path, GPTTrainer]


@pytest.fixture
def in_repo(user_repo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Work from inside the user's repo, as `tcl run` / `quick()` users do."""
    monkeypatch.chdir(user_repo)
    monkeypatch.setenv("NO_COLOR", "1")
    yield user_repo


def _tree_equal(a: Any, b: Any) -> None:
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


# -- 1: the user's own jobs are found ----------------------------------------------------------


def test_tcl_jobs_lists_the_repos_declared_jobs(in_repo: Path) -> None:
    res = cli.invoke(app, ["jobs", "--json"])
    assert res.exit_code == 0, res.output
    jobs = {j["key"]: j for j in json.loads(res.stdout)}
    assert {"custom/my_job", "my_model/analysis/probe", "tinylm/train", "gpt/train"} <= set(jobs)
    assert jobs["custom/my_job"]["class"] == "myjobs.custom.MyCustomJob"
    assert jobs["custom/my_job"]["kind"] == "RestoreableJob"


def test_tcl_run_runs_the_spec_custom_job_from_the_users_repo(in_repo: Path) -> None:
    out = in_repo / "out-run"
    args = ["run", "custom/my_job", "-", str(out), "logging/checkpoint_interval=2500"]
    res = cli.invoke(app, args)
    assert res.exit_code == 0, res.output
    scope = out / "checkpoints" / "default" / "default" / "custom-my_job"
    assert (scope / "latest").read_text().strip() == "step/7500"
    assert json.loads((scope / "step" / "7500" / "config.json").read_text()) == {"step": 7500}


# -- 4: quick() keeps an override equal to the default ----------------------------------------


def test_quick_keeps_an_override_equal_to_the_default(in_repo: Path) -> None:
    out = in_repo / "out-quick"
    with quick("custom/my_job_fixed", "first", out_path=out) as j:
        j.config.logging.checkpoint_interval = 2500
        j()
    src = "default/default/first/step/7500"
    with quick("custom/my_job_fixed", "resumed", out_path=out) as j:
        j.config.logging.checkpoint_interval = 1000  # == the default; the checkpoint says 2500
        j.restore(src)
        job = j()
    assert job.args.checkpoint_interval == 1000
    resumed = out / "checkpoints" / "default" / "default" / "resumed" / "step"
    assert sorted(p.name for p in resumed.iterdir()) == ["8000", "9000"]


# -- 3: the seed's analysis job, and its inference restore example, on a trained GPT ------------


def _trainer_logits(trainer: GPTTrainer) -> np.ndarray:
    from myjobs.analysis import some_input

    logits = trainer.model.apply({"params": trainer.state.params}, some_input)
    return np.asarray(logits)


@pytest.mark.parametrize("key", ["my_model/analysis/probe", "my_model/analysis/spec_restore"])
def test_the_spec_analysis_job_reads_a_trained_gpt(
    in_repo: Path, straight: Straight, key: str
) -> None:
    out, _config, trainer = straight
    name = key.rsplit("/", 1)[1]
    with quick(key, name, out_path=out) as j:
        j.config.analysis.num_samples = 500
        j.restore(f"{trainer.spec.scope}/step_00000040")
        j()
    results = json.loads(
        (out / "results" / "default" / "default" / name / "probe_results.json").read_text()
    )
    assert results["num_samples"] == 500
    assert results["block_size"] == 32  # the checkpoint's, not the analysis config's 512
    np.testing.assert_allclose(results["logits"], _trainer_logits(trainer), rtol=1e-5, atol=1e-5)


def test_an_inference_job_without_restore_says_so_in_one_line(in_repo: Path) -> None:
    res = cli.invoke(app, ["run", "my_model/analysis/probe", "-", str(in_repo / "out-norestore")])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    [line] = res.stderr.strip().splitlines()
    assert "--restore" in line and "tcl checkpoints" in line


# -- 3 + 4: a theseus-style model, trained by BaseTrainer, read back by an InferenceJob ---------


TINY_LM = [
    "architecture/block_size=64",
    "training/per_device_batch_size=4",
    "training/total_steps=6",
    "training/warmup_steps=1",
    "logging/report_interval=3",
    "logging/validation_interval=0",
    "logging/checkpoint_interval=0",
    "data/max_bytes=100000",
]


def _trainer(job: BasicJob[object]) -> BaseTrainer[TrainerConfig, Any]:
    """tinylm/train: the user's TinyLMTrainer, a BaseTrainer[TrainerConfig, TinyLM]."""
    assert isinstance(job, BaseTrainer)
    return job


def _probe(job: BasicJob[object]) -> InferenceJob[Any, Any]:
    """tinylm/probe: the user's TinyLMProbe, an InferenceJob."""
    assert isinstance(job, InferenceJob)
    return job


def _greedy(model: Any, params: Any, prompt: list[int], n: int) -> list[int]:
    """Reference decoding: the full sequence through the model for every new token."""
    seq = list(prompt)
    for _ in range(n):
        logits, _ = model.apply({"params": params}, jnp.asarray([seq]), deterministic=True)
        seq.append(int(jnp.argmax(logits[0, -1])))
    return seq


def test_a_theseus_style_model_trains_and_reads_back(in_repo: Path) -> None:
    out = in_repo / "out-tinylm"
    trainer = _trainer(run_job("tinylm/train", None, out, overrides=TINY_LM, name="lm"))
    assert trainer.global_step_counter_ == 6
    assert type(trainer.model).__name__ == "TinyLM"
    assert trainer.model.hidden == 32
    metrics = (out / "logs" / "default" / "default" / "lm" / "metrics.jsonl").read_text()
    losses = [json.loads(ln)["loss"] for ln in metrics.splitlines()]
    assert len(losses) == 2 and all(np.isfinite(losses))

    probe = _probe(run_job("tinylm/probe", None, out, restore="default/default/lm/step_00000006"))
    _tree_equal(probe.state.params, trainer.state.params)
    got = json.loads((probe.spec.results_dir / "probe.json").read_text())
    assert got["steps"] == 6
    model, params = trainer.model, trainer.state.params
    for prompt, text in zip(["def ", "import "], got["raw"], strict=True):
        expected = bytes(_greedy(model, params, list(prompt.encode()), 6)).decode(
            "utf-8", errors="replace"
        )
        assert text == expected  # prompt + continuation, as theseus' default return_type
    chatml = "<|im_start|>user\ndef <|im_end|>\n<|im_start|>assistant\n"
    expected = bytes(_greedy(model, params, list(chatml.encode()), 6)).decode(
        "utf-8", errors="replace"
    )
    assert got["chat"] == [expected]


def test_from_trainer_shares_the_live_state(in_repo: Path) -> None:
    """The inference job reads the trainer's state by reference: after more (donated) steps it
    sees the new params, not a deleted snapshot."""
    trainer = _trainer(
        run_job("tinylm/train", None, in_repo / "out-live", overrides=TINY_LM, name="live")
    )
    probe_job = get_job("tinylm/probe")
    assert issubclass(probe_job, InferenceJob)
    probe = probe_job.from_trainer(trainer)
    before = probe.rollout(["x"], max_new_tokens=2, return_type="output_indices")
    trainer.args = dataclasses.replace(trainer.args, total_steps=9, checkpoint_at_end=False)
    trainer.run()  # three more steps; each donates (deletes) the state it was given
    assert trainer.global_step_counter_ == 9
    assert probe.state is trainer.state
    after = probe.rollout(["x"], max_new_tokens=2, return_type="output_indices")
    assert len(before[0]) == len(after[0]) == 2


# -- Also: `tcl run` prints its progress once --------------------------------------------------


def test_tcl_run_prints_each_metrics_line_once(in_repo: Path) -> None:
    """A library (absl, via JAX) may have given the root logger a handler: progress lines must
    not come out twice."""
    root_out = StringIO()
    handler = logging.StreamHandler(root_out)
    logging.getLogger().addHandler(handler)
    try:
        res = cli.invoke(app, ["run", "tinylm/train", "-", str(in_repo / "out-print"), *TINY_LM])
    finally:
        logging.getLogger().removeHandler(handler)
    assert res.exit_code == 0, res.output
    steps = re.findall(r"train step (\d+)", res.stderr)
    assert steps == ["3", "6"]
    assert "train step" not in root_out.getvalue()
