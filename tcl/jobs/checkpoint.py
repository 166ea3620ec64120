"""On-disk checkpoints: an Orbax pytree plus rng.npy, config.json, job.json, config.yaml.

A checkpoint is written into a hidden temp dir next to its final place and renamed into place
only once every file is on disk, so a directory named like a checkpoint is always complete.
`latest` is a one-line file replaced atomically.
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import uuid
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from tcl.atomic import fsync_dir, write_atomic, write_json_atomic
from tcl.jobs.errors import CheckpointError

TREE_DIR = "checkpoint"
RNG_FILE = "rng.npy"
METADATA_FILE = "config.json"
JOB_FILE = "job.json"
CONFIG_FILE = "config.yaml"  # written last: its presence marks a complete checkpoint
LATEST_FILE = "latest"
RESTORE_CONCURRENT_GB = 4


# -- RNG ---------------------------------------------------------------------------------------


def save_rng(path: Path, key: jax.Array | None) -> None:
    """Python, NumPy and JAX random state; the JAX key is stored as its raw data + impl."""
    py_version, py_state, py_gauss = random.getstate()
    np_state = np.random.get_state(legacy=True)
    assert isinstance(np_state, tuple)
    arrays: dict[str, np.ndarray] = {
        "python_state": np.asarray(py_state, dtype=np.uint64),
        "python_meta": np.asarray([py_version, 0 if py_gauss is None else 1], dtype=np.int64),
        "python_gauss": np.asarray([py_gauss or 0.0], dtype=np.float64),
        "numpy_keys": np.asarray(np_state[1], dtype=np.uint32),
        "numpy_meta": np.asarray([np_state[2], np_state[3]], dtype=np.int64),
        "numpy_gauss": np.asarray([np_state[4]], dtype=np.float64),
    }
    if key is not None:
        arrays["jax_key_data"] = np.asarray(jax.random.key_data(key))
        arrays["jax_key_impl"] = np.asarray(str(jax.random.key_impl(key)))
    with path.open("wb") as f:
        np.savez(f, allow_pickle=False, **arrays)


def load_rng(path: Path) -> jax.Array | None:
    """Restore Python and NumPy global state; return the exact JAX key (or None)."""
    with np.load(path, allow_pickle=False) as z:
        version, has_gauss = (int(v) for v in z["python_meta"])
        gauss = float(z["python_gauss"][0]) if has_gauss else None
        random.setstate((version, tuple(int(v) for v in z["python_state"]), gauss))
        pos, np_has_gauss = (int(v) for v in z["numpy_meta"])
        np.random.set_state(
            ("MT19937", z["numpy_keys"], pos, np_has_gauss, float(z["numpy_gauss"][0]))
        )
        if "jax_key_data" not in z:
            return None
        key: jax.Array = jax.random.wrap_key_data(z["jax_key_data"], impl=str(z["jax_key_impl"]))
        return key


# -- save / load -------------------------------------------------------------------------------


def is_complete(directory: Path) -> bool:
    return (directory / CONFIG_FILE).is_file() and (directory / TREE_DIR).is_dir()


def save(
    directory: Path,
    tree: Any,
    metadata: dict[str, Any],
    job: dict[str, Any],
    config_yaml: str,
    key: jax.Array | None,
    main_process: bool = True,
) -> None:
    """Write a complete checkpoint at `directory`, replacing an older one there.

    Every process writes its shards into the same temp dir (`partial_dir`); the main process
    adds the small files and renames it into place. Call `clear_partial` on the main process
    and sync all processes before this.
    """
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_dir(directory)
    try:
        # Synchronous (the save must be on disk before the rename anyway), uncompressed (float
        # weights barely compress; zstd made saving CPU-bound at ~1/3 of disk speed) and
        # without OCDBT (one tensorstore dir per array: ~2x faster saves here, fine for local
        # and shared disks). See bench/jobs_checkpoint.py.
        checkpointer = _checkpointer()
        try:
            checkpointer.save(tmp / TREE_DIR, args=ocp.args.PyTreeSave(tree))
        finally:
            checkpointer.close()
        if main_process:
            save_rng(tmp / RNG_FILE, key)
            write_json_atomic(tmp / METADATA_FILE, metadata)
            write_json_atomic(tmp / JOB_FILE, job)
            write_atomic(tmp / CONFIG_FILE, config_yaml)
            old = None
            if directory.exists():
                old = directory.parent / f".{directory.name}.old-{uuid.uuid4().hex[:8]}"
                directory.rename(old)
            tmp.rename(directory)
            fsync_dir(directory.parent)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    finally:
        if main_process and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


class _NoOcdbtMergeNotice(logging.Filter):
    """Orbax warns on every save without OCDBT that it has no OCDBT subdirs to merge; we turned
    OCDBT off on purpose, so that line is noise in the job's log."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Skipping merge of OCDBT checkpoints" not in record.getMessage()


logging.getLogger("absl").addFilter(_NoOcdbtMergeNotice())


def _checkpointer() -> ocp.Checkpointer:
    """Synchronous PyTree checkpointer: no compression, no OCDBT, up to 4 GB in flight on
    restore (about 1.6x faster restores than the default here; bench/jobs_checkpoint.py)."""
    handler = ocp.PyTreeCheckpointHandler(
        use_ocdbt=False, use_compression=False, restore_concurrent_gb=RESTORE_CONCURRENT_GB
    )
    return ocp.Checkpointer(handler)


def partial_dir(directory: Path) -> Path:
    """Where a checkpoint is assembled; the same path on every process (multi-host saves)."""
    return directory.parent / f".{directory.name}.partial"


def clear_partial(directory: Path) -> None:
    """Remove what a crashed save left behind (main process, before a save)."""
    shutil.rmtree(partial_dir(directory), ignore_errors=True)


def load_metadata(directory: Path) -> dict[str, Any]:
    if not is_complete(directory):
        raise CheckpointError(f"no complete checkpoint at {directory}")
    data = json.loads((directory / METADATA_FILE).read_text())
    assert isinstance(data, dict)
    return data


def load(
    directory: Path, template: Any, partial: bool = False
) -> tuple[Any, dict[str, Any], jax.Array | None]:
    """(tree, metadata, jax key): the tree takes the template's shapes, dtypes and shardings.

    `partial`: the template may name a subset of the saved tree (e.g. {"params": ...} of a
    trainer's state); only that subset is read.
    """
    metadata = load_metadata(directory)
    target = jax.tree.map(ocp.utils.to_shape_dtype_struct, template)
    checkpointer = _checkpointer()
    args = ocp.args.PyTreeRestore(
        item=target,
        restore_args=ocp.checkpoint_utils.construct_restore_args(target),
        partial_restore=partial,
    )
    try:
        tree = checkpointer.restore(directory / TREE_DIR, args=args)
    finally:
        checkpointer.close()
    key = load_rng(directory / RNG_FILE) if (directory / RNG_FILE).exists() else None
    return tree, metadata, key


# -- latest ------------------------------------------------------------------------------------


def register(scope_dir: Path, suffix: str) -> None:
    if not is_complete(scope_dir / suffix):
        raise CheckpointError(f"cannot register {suffix!r}: no complete checkpoint there")
    write_atomic(scope_dir / LATEST_FILE, suffix + "\n")


def latest(scope_dir: Path) -> str | None:
    path = scope_dir / LATEST_FILE
    if not path.is_file():
        return None
    suffix = path.read_text().strip()
    return suffix if suffix and is_complete(scope_dir / suffix) else None


def list_checkpoints(scope_dir: Path) -> list[str]:
    """Suffixes (relative to `scope_dir`) of every complete checkpoint below it."""
    if not scope_dir.is_dir():
        return []
    found = [p.parent for p in scope_dir.rglob(CONFIG_FILE)]
    rels = [str(d.relative_to(scope_dir)) for d in found if is_complete(d)]
    return sorted(r for r in rels if not any(part.startswith(".") for part in Path(r).parts))
