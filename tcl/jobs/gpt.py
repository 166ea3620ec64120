"""The built-in jobs: `gpt/train` (a byte-level GPT) and `gpt/sample` (decode from it)."""

from __future__ import annotations

import dataclasses
import json

from tcl.jobs.config import field
from tcl.jobs.inference import InferenceJob
from tcl.jobs.models.transformer import Transformer
from tcl.jobs.registry import job
from tcl.jobs.trainer import BaseTrainer, TrainerConfig


@job("gpt/train")
class GPTTrainer(BaseTrainer[TrainerConfig, Transformer]):
    """Train a decoder-only transformer on bytes (default: the Python stdlib's source)."""

    MODEL = Transformer


@dataclasses.dataclass(frozen=True)
class SampleConfig:
    prompts: list[str] = field("sample/prompts", default_factory=lambda: ["def "])
    max_new_tokens: int = field("sample/max_new_tokens", default=32)
    temperature: float = field("sample/temperature", default=0.0)  # 0 → greedy
    seed: int = field("sample/seed", default=0)


@job("gpt/sample")
class GPTSample(InferenceJob[SampleConfig, Transformer]):
    """Sample continuations from a gpt/train checkpoint (run with --restore)."""

    MODEL = Transformer

    @classmethod
    def config(cls) -> list[type]:
        return [SampleConfig]

    def run(self) -> None:
        import jax

        a = self.args
        samples = self.rollout(
            a.prompts,
            max_new_tokens=a.max_new_tokens,
            temperature=a.temperature,
            key=jax.random.key(a.seed),
            return_type="output_decoded",
        )
        if self.main_process():
            for prompt, text in zip(a.prompts, samples, strict=True):
                print(json.dumps({"prompt": prompt, "sample": text}), flush=True)
            with self.spec.result("samples.json") as f:
                json.dump(
                    [{"prompt": p, "sample": s} for p, s in zip(a.prompts, samples, strict=True)],
                    f,
                    indent=2,
                )
