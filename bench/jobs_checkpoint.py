"""Checkpoint save/restore throughput (GB/s) vs numpy writing/reading the same bytes.

    uv run python bench/jobs_checkpoint.py [--mb 256] [--dir /tmp] [--repeats 3]

Save = tcl.jobs.checkpoint.save (Orbax tree + rng.npy + config files, temp dir, fsync, rename).
Baseline = np.save of every leaf into one dir + fsync of each file, on the same disk. Restore =
checkpoint.load into the same shapes vs np.load. Median of `repeats`. Target: ratios ≥ 0.5.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import numpy as np

from bench.gpucheck.checkpoint import make_tree, raw_save
from tcl.jobs import checkpoint as ckpt


def numpy_load(directory: Path, tree: dict[str, jax.Array]) -> dict[str, np.ndarray]:
    return {name: np.load(directory / f"{name}.npy") for name in tree}


def timed(fn: object, *args: object) -> float:
    t0 = time.perf_counter()
    out = fn(*args)  # type: ignore[operator]
    jax.block_until_ready(out)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mb", type=int, default=256)
    p.add_argument("--dir", default=tempfile.gettempdir())
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    tree = make_tree(a.mb * 2**20)
    jax.block_until_ready(tree)
    gb = sum(x.nbytes for x in tree.values()) / 1e9
    rows: dict[str, list[float]] = {k: [] for k in ("np_save", "ck_save", "np_load", "ck_load")}
    with tempfile.TemporaryDirectory(dir=a.dir, prefix="tcl-bench-ckpt-") as root:
        for r in range(a.repeats):
            npd, ckd = Path(root) / f"np{r}", Path(root) / f"ck{r}"
            rows["np_save"].append(timed(raw_save, npd, tree))
            rows["ck_save"].append(
                timed(
                    ckpt.save, ckd, tree, {"steps": r}, {"name": "b"}, "x: 1\n", jax.random.key(r)
                )
            )
            rows["np_load"].append(timed(numpy_load, npd, tree))
            rows["ck_load"].append(timed(lambda d: ckpt.load(d, tree)[0], ckd))
            shutil.rmtree(npd)
            shutil.rmtree(ckd)
    rate = {k: gb / statistics.median(v) for k, v in rows.items()}
    print(f"payload {gb:.3f} GB, dir {a.dir}, median of {a.repeats}")
    print(
        f"save:    numpy {rate['np_save']:.2f} GB/s  checkpoint {rate['ck_save']:.2f} GB/s  "
        f"ratio {rate['ck_save'] / rate['np_save']:.2f}  (target >= 0.5)"
    )
    print(
        f"restore: numpy {rate['np_load']:.2f} GB/s  checkpoint {rate['ck_load']:.2f} GB/s  "
        f"ratio {rate['ck_load'] / rate['np_load']:.2f}  (target >= 0.5)"
    )


if __name__ == "__main__":
    main()
