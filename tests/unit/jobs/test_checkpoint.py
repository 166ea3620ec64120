"""Checkpoint files: exact RNG, complete-only checkpoints, an atomic `latest` that is never
overwritten in place. Uses a small RestoreableJob over a dict pytree (real Orbax, JAX CPU)."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tcl.jobs import checkpoint as ckpt
from tcl.jobs.config import build_config, configuration, field
from tcl.jobs.errors import CheckpointError
from tcl.jobs.job import RestoreableJob
from tcl.jobs.spec import ExecutionSpec


@dataclasses.dataclass
class CounterConfig:
    size: int = field("counter/size", default=4)


class Counter(RestoreableJob[CounterConfig]):
    @classmethod
    def config(cls) -> list[type]:
        return [CounterConfig]

    def __init__(self, spec: ExecutionSpec) -> None:
        super().__init__(spec)
        self.tree: dict[str, Any] = {"w": jnp.zeros(self.args.size), "n": jnp.asarray(0)}
        self.key = jax.random.key(7)

    def restore_from_path(self, rel_path: str | Path) -> None:
        self.tree, meta = self.get_tree_and_metadata_from_path(rel_path, self.tree)
        self.steps = meta["steps"]

    def run(self) -> None:
        pass


def _job(tmp_path: Path) -> Counter:
    cfg, _ = build_config([CounterConfig])
    with configuration(cfg):
        return Counter(ExecutionSpec.local(tmp_path, "c"))


def test_rng_restores_the_exact_key_and_host_state(tmp_path: Path) -> None:
    key = jax.random.split(jax.random.key(123), 5)[3]  # not rebuildable from one integer
    random.seed(1)
    np.random.seed(2)
    ckpt.save_rng(tmp_path / "rng.npy", key)
    expect_py, expect_np = random.random(), np.random.random()
    random.seed(99)
    np.random.seed(99)
    restored = ckpt.load_rng(tmp_path / "rng.npy")
    assert restored is not None
    assert jax.random.key_impl(restored) == jax.random.key_impl(key)
    np.testing.assert_array_equal(jax.random.key_data(restored), jax.random.key_data(key))
    assert random.random() == expect_py and np.random.random() == expect_np


def test_save_restore_roundtrip_and_files(tmp_path: Path) -> None:
    job = _job(tmp_path)
    with configuration(build_config([CounterConfig])[0]):
        job.tree = {"w": jnp.arange(4.0), "n": jnp.asarray(3)}
        job.key = jax.random.key(11)
        job.save_tree_and_metadata("s1", job.tree, {"steps": 3})
        job.register("s1")
        directory = job._get_checkpoint_path(job.spec, "s1")
        names = {p.name for p in directory.iterdir()}
        assert {"checkpoint", "rng.npy", "config.json", "job.json", "config.yaml"} <= names
        fresh = _job(tmp_path)
        fresh.restore("s1")
    np.testing.assert_array_equal(fresh.tree["w"], np.arange(4.0))
    assert fresh.steps == 3
    np.testing.assert_array_equal(
        jax.random.key_data(fresh.key),  # type: ignore[arg-type]
        jax.random.key_data(jax.random.key(11)),
    )
    assert Counter.latest(job.spec) == "s1"
    assert Counter.checkpoints(job.spec) == ["s1"]


def test_incomplete_checkpoints_are_invisible(tmp_path: Path) -> None:
    job = _job(tmp_path)
    scope = tmp_path / "checkpoints" / job.spec.scope
    (scope / "half" / "checkpoint").mkdir(parents=True)  # crashed before config.yaml
    (scope / ".s2.partial" / "checkpoint").mkdir(parents=True)  # a save in progress
    (scope / ".s2.partial" / "config.yaml").write_text("{}")
    assert Counter.checkpoints(job.spec) == []
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        ckpt.register(scope, "half")
    (scope / "latest").write_text("half\n")
    assert Counter.latest(job.spec) is None
    # A stale partial dir from a crashed save does not break the next save of that suffix.
    with configuration(build_config([CounterConfig])[0]):
        job.save_tree_and_metadata("s2", job.tree, {"steps": 2})
    assert Counter.checkpoints(job.spec) == ["s2"]
    assert not (scope / ".s2.partial").exists()


def test_the_latest_checkpoint_is_never_overwritten_in_place(tmp_path: Path) -> None:
    job = _job(tmp_path)
    with configuration(build_config([CounterConfig])[0]):
        job.save_tree_and_metadata("s1", job.tree, {"steps": 1})
        job.register("s1")
        with pytest.raises(CheckpointError, match="latest"):
            job.save_tree_and_metadata("s1", job.tree, {"steps": 2})
        # A non-latest suffix (e.g. "best") can be replaced, atomically.
        job.save_tree_and_metadata("best", job.tree, {"steps": 1})
        job.save_tree_and_metadata("best", job.tree, {"steps": 2})
        assert job.get_metadata("best") == {"steps": 2}
    assert Counter.latest(job.spec) == "s1"
    scope = tmp_path / "checkpoints" / job.spec.scope
    assert sorted(p.name for p in scope.iterdir()) == ["best", "latest", "s1"]
