"""The decoder-only transformer's config (all under `architecture/`)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from tcl.jobs.config import field


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    vocab_size: int = field("architecture/vocab_size", default=256)  # bytes
    block_size: int = field("architecture/block_size", default=64)  # tokens per sequence
    n_layers: int = field("architecture/n_layers", default=2)
    d_model: int = field("architecture/d_model", default=64)
    n_heads: int = field("architecture/n_heads", default=4)
    mlp_ratio: int = field("architecture/mlp_ratio", default=4)
    dropout: float = field("architecture/dropout", default=0.0)
    # "auto": bfloat16 compute on GPU/TPU, float32 on CPU; params are always float32.
    dtype: str = field("architecture/dtype", default="auto")
    # dot_product_attention implementation: null (XLA) or "cudnn" (flash attention on GPU).
    attention_impl: str | None = field("architecture/attention_impl", default=None)
    remat: bool = field("architecture/remat", default=False)  # recompute blocks in backward

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def cache_key(self) -> str:
        """A stable description of the model (the auto batch-size cache key uses it)."""
        data: dict[str, Any] = dataclasses.asdict(self)
        return json.dumps(data, sort_keys=True)
