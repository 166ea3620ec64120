"""Checkpoint files: exact RNG, complete-only checkpoints, an atomic `latest`, and saving over
any suffix (the latest one included) by writing beside it and swapping. Uses a small
RestoreableJob over a dict pytree (real Orbax, JAX CPU)."""

from __future__ import annotations

import dataclasses
import random
import shutil
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


def test_saving_over_the_latest_checkpoint_swaps_it_in_atomically(tmp_path: Path) -> None:
    """Seed 001's custom job saves the step it was restored from again, into the suffix `latest`
    names: the new checkpoint is written beside it, swapped in, and the old one removed."""
    job = _job(tmp_path)
    scope = tmp_path / "checkpoints" / job.spec.scope
    with configuration(build_config([CounterConfig])[0]):
        job.save_tree_and_metadata("s1", job.tree, {"steps": 1})
        job.register("s1")
        job.save_tree_and_metadata("s1", {"w": jnp.ones(4), "n": jnp.asarray(2)}, {"steps": 2})
        assert job.get_metadata("s1") == {"steps": 2}
        fresh = _job(tmp_path)
        fresh.restore("s1")
    np.testing.assert_array_equal(fresh.tree["w"], np.ones(4))
    assert Counter.latest(job.spec) == "s1"
    assert sorted(p.name for p in scope.iterdir()) == ["latest", "s1"]  # nothing left beside


def test_without_an_atomic_exchange_a_crash_mid_swap_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the file system has no RENAME_EXCHANGE the old checkpoint is moved aside first; a
    crash before the new one is in place leaves `latest` resolving to the old one."""
    from tcl.jobs import layout

    monkeypatch.setattr(layout, "_exchange", lambda a, b: False)
    job = _job(tmp_path)
    scope = tmp_path / "checkpoints" / job.spec.scope
    with configuration(build_config([CounterConfig])[0]):
        job.save_tree_and_metadata("s1", job.tree, {"steps": 1})
        job.register("s1")
        job.save_tree_and_metadata("s1", job.tree, {"steps": 2})  # the fallback path, whole
        assert job.get_metadata("s1") == {"steps": 2}
        assert sorted(p.name for p in scope.iterdir()) == ["latest", "s1"]

        def crash(new: Path, target: Path) -> None:
            target.rename(layout.aside_dir(target))  # moved aside ... and the process died
            raise KeyboardInterrupt

        monkeypatch.setattr(layout, "_swap_by_moving_aside", crash)
        with pytest.raises(KeyboardInterrupt):
            job.save_tree_and_metadata("s1", job.tree, {"steps": 3})
    assert not (scope / "s1").exists()
    assert Counter.latest(job.spec) == "s1"  # put back from the aside copy
    assert job.get_metadata("s1") == {"steps": 2}


def test_rng_npy_is_one_array_that_np_load_reads(tmp_path: Path) -> None:
    key = jax.random.key(5)
    ckpt.save_rng(tmp_path / "rng.npy", key)
    state = np.load(tmp_path / "rng.npy")  # the seed's table: rng.npy, read with np.load
    assert isinstance(state, np.ndarray) and state.shape == ()
    np.testing.assert_array_equal(state["jax_key_data"], jax.random.key_data(key))
    assert str(state["jax_key_impl"]) == str(jax.random.key_impl(key))
    assert state["numpy_keys"].shape == (624,)


def test_an_older_npz_rng_file_still_loads(tmp_path: Path) -> None:
    key = jax.random.key(9)
    with (tmp_path / "rng.npy").open("wb") as f:  # what tcl wrote before: an npz archive
        py_version, py_state, _gauss = random.getstate()
        np_state = np.random.get_state(legacy=True)
        assert isinstance(np_state, tuple)
        np.savez(
            f,
            python_state=np.asarray(py_state, dtype=np.uint64),
            python_meta=np.asarray([py_version, 0], dtype=np.int64),
            python_gauss=np.asarray([0.0]),
            numpy_keys=np.asarray(np_state[1], dtype=np.uint32),
            numpy_meta=np.asarray([np_state[2], np_state[3]], dtype=np.int64),
            numpy_gauss=np.asarray([np_state[4]]),
            jax_key_data=np.asarray(jax.random.key_data(key)),
            jax_key_impl=np.asarray(str(jax.random.key_impl(key))),
        )
    restored = ckpt.load_rng(tmp_path / "rng.npy")
    assert restored is not None
    np.testing.assert_array_equal(jax.random.key_data(restored), jax.random.key_data(key))


def test_a_non_latest_suffix_is_replaced_too(tmp_path: Path) -> None:
    job = _job(tmp_path)
    with configuration(build_config([CounterConfig])[0]):
        job.save_tree_and_metadata("s1", job.tree, {"steps": 1})
        job.register("s1")
        job.save_tree_and_metadata("best", job.tree, {"steps": 1})
        job.save_tree_and_metadata("best", job.tree, {"steps": 2})
        assert job.get_metadata("best") == {"steps": 2}
    assert Counter.latest(job.spec) == "s1"
    scope = tmp_path / "checkpoints" / job.spec.scope
    assert sorted(p.name for p in scope.iterdir()) == ["best", "latest", "s1"]


def _save(directory: Path, tree: Any) -> None:
    ckpt.save(directory, tree, {"steps": 0}, {"name": "t"}, "x: 1\n", None)


def test_restore_reads_arrays_without_orbaxs_per_shard_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """jax.Array leaves are read by tcl's one-copy reader, not Orbax's np.zeros + copy +
    device_put path (3 copies, restores at ~0.3x np.load; bench/jobs_checkpoint.py)."""
    from orbax.checkpoint._src.serialization import serialization

    tree = {"w": jnp.arange(1000, dtype=jnp.float32), "n": jnp.asarray(3)}
    _save(tmp_path / "c", tree)

    async def no(*args: object, **kwargs: object) -> None:
        raise AssertionError("Orbax's per-shard reader was used")

    monkeypatch.setattr(serialization, "_read_shard", no)
    restored, _, _ = ckpt.load(tmp_path / "c", tree)
    np.testing.assert_array_equal(restored["w"], np.arange(1000, dtype=np.float32))
    assert int(restored["n"]) == 3
    # On the CPU backend the restored buffer is the (64-byte aligned) host buffer read into.
    assert restored["w"].unsafe_buffer_pointer() % 64 == 0


def test_restore_is_bit_identical_across_dtypes_shapes_and_casts(tmp_path: Path) -> None:
    key = jax.random.key(0)
    tree: dict[str, Any] = {
        "f32": jax.random.normal(key, (33, 7), jnp.float32),
        "bf16": jax.random.normal(key, (5, 3, 2), jnp.bfloat16),
        "i8": jnp.arange(-100, 100, dtype=jnp.int8),
        "bool": jnp.arange(10) % 3 == 0,
        "scalar": jnp.asarray(2.5, jax.dtypes.canonicalize_dtype(jnp.float64)),  # f32 unless x64
        "nested": {"u32": jnp.asarray([0, 1, 2**32 - 1], jnp.uint32)},
    }
    _save(tmp_path / "c", tree)
    abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), tree)
    restored, _, _ = ckpt.load(tmp_path / "c", abstract)
    for a, b in zip(jax.tree.leaves(tree), jax.tree.leaves(restored), strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()
    # A template of another dtype gets the saved values cast to it.
    cast, _, _ = ckpt.load(
        tmp_path / "c", {"f32": jax.ShapeDtypeStruct((33, 7), jnp.bfloat16)}, partial=True
    )
    assert cast["f32"].dtype == jnp.bfloat16
    np.testing.assert_array_equal(cast["f32"], tree["f32"].astype(jnp.bfloat16))


def test_typed_prng_keys_and_ocdbt_checkpoints_still_restore(tmp_path: Path) -> None:
    """What the one-copy reader leaves to Orbax: typed PRNG key leaves, and checkpoints written
    by Orbax with OCDBT (its default) rather than tcl's one-dir-per-array layout."""
    import orbax.checkpoint as ocp

    tree = {"w": jnp.arange(6.0).reshape(2, 3), "key": jax.random.key(42)}
    _save(tmp_path / "c", tree)
    restored, _, _ = ckpt.load(tmp_path / "c", tree)
    np.testing.assert_array_equal(restored["w"], tree["w"])
    np.testing.assert_array_equal(
        jax.random.key_data(restored["key"]), jax.random.key_data(tree["key"])
    )

    plain = {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.ones(4, jnp.int32)}
    directory = tmp_path / "ocdbt"
    _save(directory, {"other": jnp.zeros(1)})
    shutil.rmtree(directory / ckpt.TREE_DIR)
    with ocp.Checkpointer(ocp.PyTreeCheckpointHandler(use_ocdbt=True)) as checkpointer:
        checkpointer.save(directory / ckpt.TREE_DIR, args=ocp.args.PyTreeSave(plain))
    assert (directory / ckpt.TREE_DIR / "manifest.ocdbt").exists()
    restored, metadata, _ = ckpt.load(directory, plain)
    np.testing.assert_array_equal(restored["w"], plain["w"])
    np.testing.assert_array_equal(restored["b"], plain["b"])
    assert metadata == {"steps": 0}
