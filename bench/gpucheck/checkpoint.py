"""Row 5, checkpoints of device arrays: ``tcl.jobs.checkpoint`` save and restore (Orbax)
against the raw path, ``jax.device_get`` + ``np.save`` (fsync) and ``np.load`` + ``device_put``.

The tree is 16 float32 arrays made on the device (2 GiB on a GPU, 64 MiB on a CPU). Restore
reads into the template's shardings, so the arrays land on the device they came from. Median of
`REPEATS`; both sides read files just written (the page cache holds them alike). Goal: restore
≥ 0.5x raw.

    python -m bench.gpucheck.checkpoint
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bench.gpucheck.report import Outcome, RowResult, run_row
from tcl.jobs import checkpoint as ckpt

RESTORE_GOAL = 0.5
REPEATS = 3
LEAVES = 16


def make_tree(total_bytes: int) -> dict[str, jax.Array]:
    n = total_bytes // 4 // LEAVES
    key = jax.random.key(0)
    return {
        f"layer_{i:02d}": jax.random.normal(jax.random.fold_in(key, i), (n,), jnp.float32)
        for i in range(LEAVES)
    }


def raw_save(directory: Path, tree: dict[str, jax.Array]) -> None:
    directory.mkdir(parents=True)
    for name, leaf in tree.items():
        with (directory / f"{name}.npy").open("wb") as f:
            np.save(f, jax.device_get(leaf))
            f.flush()
            os.fsync(f.fileno())


def raw_load(directory: Path, tree: dict[str, jax.Array]) -> dict[str, jax.Array]:
    return {
        name: jax.device_put(np.load(directory / f"{name}.npy"), leaf.sharding)
        for name, leaf in tree.items()
    }


def timed(fn: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return time.perf_counter() - t0, out


def restore(directory: Path, tree: dict[str, jax.Array]) -> Any:
    return ckpt.load(directory, tree)[0]


def check() -> RowResult:
    device = jax.devices()[0]
    total = 2 * 2**30 if device.platform == "gpu" else 64 * 2**20
    tree = make_tree(total)
    jax.block_until_ready(tree)
    gb = sum(x.nbytes for x in tree.values()) / 1e9
    times: dict[str, list[float]] = {k: [] for k in ("raw_save", "save", "raw_load", "load")}
    landed_on = set()
    with tempfile.TemporaryDirectory(prefix="tcl-gpucheck-ckpt-") as root:
        for r in range(REPEATS):
            rawd, ckd = Path(root) / f"raw{r}", Path(root) / f"ck{r}"
            for name, fn, args in (
                ("raw_save", raw_save, (rawd, tree)),
                ("save", ckpt.save, (ckd, tree, {"steps": r}, {"name": "g"}, "x: 1\n", None)),
                ("raw_load", raw_load, (rawd, tree)),
                ("load", restore, (ckd, tree)),
            ):
                seconds, restored = timed(fn, *args)
                times[name].append(seconds)
            landed_on |= {str(d) for x in restored.values() for d in x.devices()}
            same = all(bool(jnp.array_equal(restored[k], tree[k])) for k in tree)
            if not same:
                raise AssertionError("the restored tree differs from the saved one")
            shutil.rmtree(rawd)
            shutil.rmtree(ckd)
    rate = {k: gb / statistics.median(v) for k, v in times.items()}
    save_ratio, load_ratio = rate["save"] / rate["raw_save"], rate["load"] / rate["raw_load"]
    figures = {
        "gb": round(gb, 3),
        "device": f"{device.platform}:{device.device_kind}",
        **{f"{k}_gb_s": round(v, 2) for k, v in rate.items()},
        "save_ratio": round(save_ratio, 3),
        "restore_ratio": round(load_ratio, 3),
        "restored_on": sorted(landed_on),
    }
    summary = (
        f"{gb:.2f} GB of {device.platform} arrays: save {rate['save']:.2f} GB/s vs raw "
        f"{rate['raw_save']:.2f} ({save_ratio:.2f}x); restore {rate['load']:.2f} GB/s vs raw "
        f"{rate['raw_load']:.2f} ({load_ratio:.2f}x, goal ≥ {RESTORE_GOAL}x); restored onto "
        f"{', '.join(sorted(landed_on))}"
    )
    met = load_ratio >= RESTORE_GOAL
    return RowResult("checkpoint", Outcome.OK if met else Outcome.BELOW_GOAL, summary, figures)


if __name__ == "__main__":
    sys.exit(run_row("checkpoint", check))
