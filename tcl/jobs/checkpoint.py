"""Checkpoints: an Orbax pytree plus rng.npy, config.json, job.json, config.yaml.

A checkpoint is written into a hidden temp dir next to its final place and swapped into place
only once every file is on disk (`layout.replace_dir`), so a directory named like a checkpoint is
always complete, also when the save replaces the checkpoint `latest` names. The file layout,
`latest` and listings live in `tcl.jobs.layout` (no JAX); the random state in `tcl.jobs.rng`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import shutil
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import tensorstore as ts
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


def _checkpointer(restore: bool = False) -> ocp.Checkpointer:
    """Synchronous PyTree checkpointer: no compression, no OCDBT, up to 4 GB in flight on
    restore. `restore`: jax.Array leaves are read by `_FastArrayHandler` (same files)."""
    handler = ocp.PyTreeCheckpointHandler(
        use_ocdbt=False,
        use_compression=False,
        restore_concurrent_gb=RESTORE_CONCURRENT_GB,
        **({"type_handler_registry": _RestoreRegistry()} if restore else {}),
    )
    return ocp.Checkpointer(handler)


# Restore speed (bench/jobs_checkpoint.py). Orbax 0.12 reads every shard with TensorStore's
# default file I/O (pread into a TensorStore buffer), copies that into a fresh np.zeros array
# and device_puts it; on the CPU backend that np.zeros buffer is 16-byte aligned, so XLA copies
# it once more (it adopts host memory without a copy only when 64-byte aligned). Three copies of
# every byte where np.load makes one: restores ran at ~0.25x np.load. `_FastArrayHandler` reads
# the same zarr files through a memory-mapped TensorStore context (file_io_mode memmap: no
# intermediate buffer) straight into a 64-byte aligned buffer that device_put adopts: one copy,
# ~0.75x np.load on this 2-core box. On an accelerator the last step is the host-to-device
# transfer either way. Checkpoints are immutable once renamed into place, so mapping them is
# safe; the files and their layout are unchanged (plain Orbax reads them, and vice versa).
_ALIGN = 64
_READ_CONTEXT_SPEC = {"file_io_concurrency": {"limit": 128}, "file_io_mode": {"mode": "memmap"}}


def _aligned_empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + _ALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % _ALIGN
    return raw[start : start + nbytes].view(dtype).reshape(shape)


def _index_key(index: tuple[slice, ...], shape: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    return tuple(sl.indices(n) for sl, n in zip(index, shape, strict=True))


class _FastArrayHandler(ocp.type_handlers.ArrayHandler):  # type: ignore[misc]
    """Orbax's ArrayHandler, reading non-OCDBT zarr arrays with one copy (see above).

    Reads what this process's devices hold of each array (every process reads only its own
    shards, as Orbax does), once per distinct shard, within the handler's byte limit. Anything
    else (OCDBT checkpoints, PRNG key arrays, padding/truncation, shardings given as a mesh or
    layout) goes to the registered jax.Array handler unchanged.
    """

    async def deserialize(
        self,
        infos: Any,
        args: Any = None,
    ) -> Any:
        default = ocp.type_handlers.get_type_handler(jax.Array)
        if args is None:
            return await default.deserialize(infos, args)
        fast = [
            i for i, (info, arg) in enumerate(zip(infos, args, strict=True)) if _fast(info, arg)
        ]
        slow = [i for i in range(len(infos)) if i not in set(fast)]
        context = ts.Context(_READ_CONTEXT_SPEC)
        out: list[Any] = [None] * len(infos)

        async def read_slow() -> None:
            if slow:
                arrays = await default.deserialize(
                    [infos[i] for i in slow], [args[i] for i in slow]
                )
                for i, array in zip(slow, arrays, strict=True):
                    out[i] = array

        async def read_fast(i: int) -> None:
            out[i] = await _read_array(infos[i], args[i], context, self._metadata_key)

        await asyncio.gather(read_slow(), *(read_fast(i) for i in fast))
        return out


def _fast(info: Any, arg: Any) -> bool:
    return bool(
        not info.is_ocdbt_checkpoint
        and info.name is not None
        and info.parent_dir is not None
        and isinstance(arg, ocp.ArrayRestoreArgs)
        and isinstance(arg.sharding, jax.sharding.Sharding)
        and getattr(arg, "strict", True)
        and not (arg.dtype is not None and jnp.issubdtype(arg.dtype, jax.dtypes.prng_key))
    )


async def _read_array(info: Any, arg: Any, context: ts.Context, metadata_key: str | None) -> Any:
    await info.await_path_creation()
    spec = ocp.type_handlers.get_json_tspec_read(
        info,
        use_ocdbt=False,
        metadata_key=metadata_key,
        raise_array_data_missing_error=info.raise_array_data_missing_error,
    )
    t = await ts.open(spec, open=True, context=context)
    shape = tuple(t.shape)
    if arg.global_shape is not None and tuple(arg.global_shape) != shape:
        raise ValueError(
            f"{info.name}: requested shape {tuple(arg.global_shape)} is not the stored {shape}"
        )
    stored = np.dtype(t.dtype.numpy_dtype)
    dtype = stored if arg.dtype is None else np.dtype(arg.dtype)
    sharding: jax.sharding.Sharding = arg.sharding
    shards: dict[tuple[tuple[int, ...], ...], tuple[tuple[slice, ...], list[jax.Device]]] = {}
    for device, index in sharding.addressable_devices_indices_map(shape).items():
        index = index if index is not None else tuple(slice(None) for _ in shape)
        shards.setdefault(_index_key(index, shape), (index, []))[1].append(device)

    async def read_shard(index: tuple[slice, ...], devices: list[jax.Device]) -> list[jax.Array]:
        domain = ts.IndexDomain(shape=shape)[ts.d[:][index]]
        host = _aligned_empty(tuple(domain.shape), stored)
        limiter = info.byte_limiter
        if limiter is not None:
            await limiter.wait_for_bytes(host.nbytes)
        try:
            await ts.array(host)[ts.d[:].translate_to[domain.origin]].write(t[domain])
            if dtype != stored:
                cast = _aligned_empty(host.shape, dtype)
                np.copyto(cast, host, casting="unsafe")
                host = cast
            return [
                jax.device_put(
                    host, jax.sharding.SingleDeviceSharding(d, memory_kind=sharding.memory_kind)
                )
                for d in devices
            ]
        finally:
            if limiter is not None:
                await limiter.release_bytes(host.nbytes)

    parts = await asyncio.gather(*(read_shard(index, ds) for index, ds in shards.values()))
    return jax.make_array_from_single_device_arrays(
        shape, sharding, [a for part in parts for a in part]
    )


class _RestoreRegistry:
    """The global type handler registry, with `_FastArrayHandler` for jax.Array."""

    def __init__(self) -> None:
        self._array = _FastArrayHandler()

    def _is_array(self, ty: Any) -> bool:
        if isinstance(ty, str):
            return bool(ty == self._array.typestr())
        return isinstance(ty, type) and issubclass(ty, jax.Array)

    def get(self, ty: Any) -> Any:
        return self._array if self._is_array(ty) else ocp.type_handlers.get_type_handler(ty)

    def has(self, ty: Any) -> bool:
        return self._is_array(ty) or ocp.type_handlers.has_type_handler(ty)

    def add(
        self, ty: Any, handler: Any, func: Any = None, override: bool = False, **_: Any
    ) -> None:
        raise NotImplementedError("the restore registry is fixed; register types globally")


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
    checkpointer = _checkpointer(restore=True)
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
