"""Checkpoint restore of sharded arrays on 4 fake CPU devices: the saved layout restored as
saved, resharded to another template sharding, and replicated for an unsharded template,
bit-identical shard by shard."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import sys
from pathlib import Path
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from tcl.jobs import checkpoint as ckpt

assert jax.device_count() == 4, jax.devices()
mesh = Mesh(np.array(jax.devices()).reshape(2, 2), ("a", "b"))
def sh(*spec):
    return NamedSharding(mesh, P(*spec))
x = jax.random.normal(jax.random.key(0), (8, 12), jnp.float32)
tree = {
    "both": jax.device_put(x, sh("a", "b")),
    "rows": jax.device_put(x, sh("a")),
    "repl": jax.device_put(x, sh()),
    "cols": jax.device_put(x.astype(jnp.bfloat16), sh(None, "b")),
    "n": jax.device_put(jnp.asarray(7, jnp.int32), sh()),
}
d = Path(sys.argv[1]) / "c"
ckpt.save(d, tree, {"steps": 1}, {"name": "s"}, "x: 1\n", None)

def check(restored, shardings):
    for k, want in tree.items():
        got = restored[k]
        assert got.dtype == want.dtype and got.shape == want.shape, k
        assert got.sharding.is_equivalent_to(shardings[k], got.ndim), (k, got.sharding)
        full = np.asarray(want)
        for shard in got.addressable_shards:
            assert np.asarray(shard.data).tobytes() == full[shard.index].tobytes(), (k, shard)

r, _, _ = ckpt.load(d, tree)
check(r, {k: v.sharding for k, v in tree.items()})
other = {k: (sh("b", "a") if v.ndim == 2 else sh()) for k, v in tree.items()}
r, _, _ = ckpt.load(d, {k: jax.ShapeDtypeStruct(v.shape, v.dtype, sharding=other[k])
                        for k, v in tree.items()})
check(r, other)
r, _, _ = ckpt.load(d, {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in tree.items()})
check(r, {k: NamedSharding(Mesh(np.array(jax.devices()), ("all",)), P()) for k in tree})
print("RESULT ok")
"""


def test_sharded_arrays_restore_bit_identical_as_saved_resharded_and_replicated(
    tmp_path: Path,
) -> None:
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4 "
        "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
        "JAX_PLATFORMS": "cpu",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "RESULT ok" in done.stdout
