"""A GPT's checkpoint saved and restored through a JuiceFS mount vs the same on local disk.

    uv run python bench/juicefs_checkpoint.py [--d-model 512] [--layers 8] [--repeats 3]

The volume is the tests' (scripts/testbed/juicefs-up.sh, loopback only: Redis as the metadata
engine, a local directory as the object storage) mounted here with the shim's own code
(``tcl.shim.clusterfs.ClusterMounts``, ``juicefs mount --background``), so what is measured is
JuiceFS's FUSE path and its metadata round trips against the local disk both sit on. The tree
is the params and Adam state of ``tcl.jobs``' Transformer (float32). Save =
``tcl.jobs.checkpoint.save`` (temp dir, fsync, rename); restore = ``checkpoint.load`` after
an unmount, its cache dir emptied and a mount again: a cold read, as a resumed run's first
read on another host is. Median of ``repeats``; prints GB/s and the ratio JuiceFS/local.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import jax.numpy as jnp
from flax.core import meta

from tcl.jobs import checkpoint as ckpt
from tcl.jobs.models.config import ModelConfig
from tcl.jobs.models.transformer import Transformer
from tcl.shim.api import ClusterFs
from tcl.shim.clusterfs import ClusterMounts

REPO = Path(__file__).resolve().parent.parent
BASE = "/tmp/tcl-bench-juicefs"


def gpt_state(d_model: int, layers: int) -> dict[str, Any]:
    cfg = ModelConfig(d_model=d_model, n_layers=layers, n_heads=8, block_size=128)
    model = Transformer(cfg)
    boxed = model.init(jax.random.key(0), jnp.zeros((1, cfg.block_size), jnp.int32))["params"]
    params = meta.unbox(boxed)  # as the trainer keeps them
    # Adam's state: two more trees of the params' shapes (mu, nu)
    return {
        "params": params,
        "mu": jax.tree.map(jnp.zeros_like, params),
        "nu": jax.tree.map(jnp.ones_like, params),
    }


def timed(fn: Any, *args: Any) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t0


def measure(root: Path, tree: Any, repeats: int, drop_cache: Any) -> tuple[float, float]:
    saves, loads = [], []
    for r in range(repeats):
        d = root / f"ck{r}"
        saves.append(
            timed(ckpt.save, d, tree, {"steps": r}, {"name": "b"}, "x: 1\n", jax.random.key(r))
        )
        drop_cache()
        loads.append(timed(lambda d: ckpt.load(d, tree)[0], d))
        shutil.rmtree(d)
    return statistics.median(saves), statistics.median(loads)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--redis-port", type=int, default=6388)
    a = p.parse_args()
    env = {
        **os.environ,
        "BASE": BASE,
        "REDIS_PORT": str(a.redis_port),
        "BRIDGE_IP": "",
        "VENV": str(REPO / ".venv"),
    }
    url = subprocess.run(
        ["bash", str(REPO / "scripts/testbed/juicefs-up.sh")],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()[-1]
    password = Path(BASE, "juicefs", "password").read_text().strip()
    mount_point = Path(BASE, "mnt")
    cache = Path(BASE, "cache")
    fs = ClusterFs(
        meta_url=url,
        meta_password=password,
        mount_point=str(mount_point),
        cache_dir=str(cache),
        unmount_after_idle_s=None,
    )
    state = Path(tempfile.mkdtemp(prefix="tcl-bench-shim-"))
    juicefs = str(REPO / ".venv/bin/juicefs")

    def mount() -> None:
        asyncio.run(ClusterMounts(state).acquire("bench", fs))

    def remount_cold() -> None:
        subprocess.run([juicefs, "umount", str(mount_point)], check=True, capture_output=True)
        shutil.rmtree(cache, ignore_errors=True)
        mount()

    mount()
    try:
        tree = gpt_state(a.d_model, a.layers)
        gb = sum(x.nbytes for x in jax.tree.leaves(tree)) / 1e9
        with tempfile.TemporaryDirectory(prefix="tcl-bench-local-") as local:
            disk = measure(Path(local), tree, a.repeats, lambda: None)
        jfs = measure(mount_point, tree, a.repeats, remount_cold)
    finally:
        subprocess.run(
            [juicefs, "umount", "--force", str(mount_point)], check=False, capture_output=True
        )
        subprocess.run(
            ["bash", str(REPO / "scripts/testbed/juicefs-down.sh")],
            env=env,
            check=False,
            capture_output=True,
        )
    print(
        f"GPT d_model {a.d_model} x {a.layers} layers: params + Adam state {gb:.3f} GB, "
        f"median of {a.repeats}"
    )
    for what, i in (("save", 0), ("restore", 1)):
        print(
            f"{what:8s} local {gb / disk[i]:.2f} GB/s  juicefs {gb / jfs[i]:.2f} GB/s  "
            f"ratio {disk[i] / jfs[i]:.2f}"
        )


if __name__ == "__main__":
    main()
