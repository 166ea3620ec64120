"""Training data behind a small interface: `TokenDataset.batch(step, ...)` → tokens [B, T+1].

Batches are a pure function of (seed, split, step, shard), so resuming at step s replays exactly
the batches a straight run would have seen, with no iterator state to checkpoint. Register your
own dataset with `@register_dataset("name")` and select it with `data/dataset: name`.
"""

from __future__ import annotations

import dataclasses
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from tcl.jobs.config import field
from tcl.jobs.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class DataConfig:
    dataset: str = field("data/dataset", default="stdlib_bytes")
    max_bytes: int = field("data/max_bytes", default=2_000_000)  # corpus size cap
    val_fraction: float = field("data/val_fraction", default=0.05)
    seed: int = field("data/seed", default=0)


class TokenDataset(Protocol):
    vocab_size: int

    def batch(
        self, step: int, batch_size: int, seq_len: int, split: str = "train", shard: int = 0
    ) -> np.ndarray:
        """int32 tokens [batch_size, seq_len + 1] (inputs are [:, :-1], targets [:, 1:])."""
        ...


DatasetFactory = Callable[[DataConfig], TokenDataset]
DATASETS: dict[str, DatasetFactory] = {}


def register_dataset(name: str) -> Callable[[DatasetFactory], DatasetFactory]:
    def register(factory: DatasetFactory) -> DatasetFactory:
        DATASETS[name] = factory
        return factory

    return register


def make_dataset(cfg: DataConfig) -> TokenDataset:
    try:
        factory = DATASETS[cfg.dataset]
    except KeyError:
        raise ConfigError(
            f"unknown dataset {cfg.dataset!r} (known: {sorted(DATASETS)})", key="data/dataset"
        ) from None
    return factory(cfg)


class ByteCorpus:
    """Random windows of a byte string; the last `val_fraction` is the validation split."""

    vocab_size = 256

    def __init__(self, data: bytes, val_fraction: float, seed: int) -> None:
        arr = np.frombuffer(data, dtype=np.uint8).astype(np.int32)
        n_val = max(int(len(arr) * val_fraction), 1)
        self.splits = {"train": arr[:-n_val], "val": arr[-n_val:]}
        self.seed = seed

    def batch(
        self, step: int, batch_size: int, seq_len: int, split: str = "train", shard: int = 0
    ) -> np.ndarray:
        data = self.splits[split]
        if len(data) <= seq_len + 1:
            raise ConfigError(
                f"the {split} split has {len(data)} tokens, fewer than "
                f"block_size + 1 = {seq_len + 1}",
                key="data/max_bytes",
            )
        rng = np.random.default_rng([self.seed, 0 if split == "train" else 1, step, shard])
        starts = rng.integers(0, len(data) - seq_len - 1, size=batch_size)
        idx = starts[:, None] + np.arange(seq_len + 1)[None, :]
        out: np.ndarray = data[idx]
        return out


def stdlib_source(max_bytes: int) -> bytes:
    """The Python standard library's own .py files, in sorted order, up to `max_bytes`."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks: list[bytes] = []
    total = 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        chunks.append(data)
        total += len(data)
        if total >= max_bytes:
            break
    return b"".join(chunks)[:max_bytes]


@register_dataset("stdlib_bytes")
def _stdlib_bytes(cfg: DataConfig) -> TokenDataset:
    return ByteCorpus(stdlib_source(cfg.max_bytes), cfg.val_fraction, cfg.seed)
