"""Checkpoints: an Orbax pytree plus rng.npy, config.json, job.json, config.yaml.

A checkpoint is written into a hidden temp dir next to its final place and swapped into place
only once every file is on disk (`layout.replace_dir`), so a directory named like a checkpoint is
always complete, also when the save replaces the checkpoint `latest` names. The file layout,
`latest` and listings live in `tcl.jobs.layout` (no JAX); the random state in `tcl.jobs.rng`.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax.core import meta

from tcl.atomic import write_atomic, write_json_atomic
from tcl.jobs.layout import (
    CONFIG_FILE,
    JOB_FILE,
    LATEST_FILE,
    METADATA_FILE,
    RNG_FILE,
    TREE_DIR,
    clear_partial,
    is_complete,
    latest,
    list_checkpoints,
    load_metadata,
    partial_dir,
    register,
    replace_dir,
)
from tcl.jobs.rng import load_rng, save_rng

__all__ = [
    "CONFIG_FILE",
    "JOB_FILE",
    "LATEST_FILE",
    "METADATA_FILE",
    "RNG_FILE",
    "TREE_DIR",
    "clear_partial",
    "is_complete",
    "latest",
    "list_checkpoints",
    "load",
    "load_metadata",
    "load_rng",
    "partial_dir",
    "register",
    "save",
    "save_rng",
]

RESTORE_CONCURRENT_GB = 4


def save(
    directory: Path,
    tree: Any,
    metadata: dict[str, Any],
    job: dict[str, Any],
    config_yaml: str,
    key: jax.Array | None,
    main_process: bool = True,
) -> None:
    """Write a complete checkpoint at `directory`, replacing the one there (even the `latest`).

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
            replace_dir(tmp, directory)
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


def _is_struct(tree: Any) -> bool:
    is_instance = dataclasses.is_dataclass(tree) and not isinstance(tree, type)
    return is_instance and hasattr(tree, "replace")


def _target(leaf: Any) -> Any:
    struct = ocp.utils.to_shape_dtype_struct(leaf)
    if getattr(struct, "sharding", None) is None:
        return jax.ShapeDtypeStruct(struct.shape, struct.dtype, sharding=_replicated())
    return struct


def _replicated() -> jax.sharding.NamedSharding:
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("all",))
    return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def load(
    directory: Path, template: Any, partial: bool = False
) -> tuple[Any, dict[str, Any], jax.Array | None]:
    """(tree, metadata, jax key): the tree takes the template's shapes, dtypes and shardings.

    `partial`: the template may name a subset of the saved tree (e.g. {"params": ...} of a
    trainer's state); only that subset is read.
    """
    metadata = load_metadata(directory)
    template = meta.unbox(template)
    if partial and _is_struct(template):
        # A state dataclass (e.g. TrainState with an inference optimizer): read the fields that
        # hold arrays; the others (an optax.identity() state) have nothing to read.
        fields = {
            f.name: getattr(template, f.name)
            for f in dataclasses.fields(template)
            if f.metadata.get("pytree_node", True) and jax.tree.leaves(getattr(template, f.name))
        }
        part, metadata, key = load(directory, fields, partial=True)
        return template.replace(**part), metadata, key
    # A template may be boxed (an eval_shape'd Flax init carries logical partitioning) and
    # abstract without shardings (seed 001's template state): unbox it, and read what has no
    # sharding replicated; the caller may device_put the result where it wants it.
    target = jax.tree.map(_target, template)
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
