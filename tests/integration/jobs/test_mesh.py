"""The (data, model) mesh on 4 fake CPU devices: params are sharded by the logical rules, and
data-by-model layouts that see the same global batch compute the same losses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

SCRIPT = r"""
import json, sys, tempfile
import jax
from tcl.jobs.config import configuration
from tcl.jobs.gpt import GPTTrainer
from tcl.jobs.metrics import read_metrics
from tcl.jobs.run import load_config
from tcl.jobs.spec import ExecutionSpec

assert jax.device_count() == 4, jax.devices()
out = {}
for mp, pdbs, heads in ((1, 2, 2), (2, 4, 2), (4, 8, 4)):  # global batch 8 in each layout
    full, _ = load_config("gpt/train", sys.argv[1], [f"architecture/n_heads={heads}",
        f"mesh/model_parallel={mp}", f"training/per_device_batch_size={pdbs}",
        "training/total_steps=3", "logging/checkpoint_at_end=false",
        "logging/checkpoint_interval=0"])
    with tempfile.TemporaryDirectory() as root, configuration(full):
        t = GPTTrainer(ExecutionSpec.local(root, f"mp{mp}"))
        t.run()
        fc = t.state.params["block_0"]["fc"]["kernel"]
        mu = t.state.opt_state[1][0].mu["block_0"]["fc"]["kernel"]
        out[mp] = {
            "mesh": dict(t.mesh.shape),
            "fc_spec": [str(s) for s in fc.sharding.spec],
            "mu_spec": [str(s) for s in mu.sharding.spec],
            "fc_shard_shape": list(fc.addressable_shards[0].data.shape),
            "losses": [r["loss"] for r in read_metrics(t.spec.logs_dir / "metrics.jsonl")],
        }
full, _ = load_config("gpt/train", sys.argv[1], ["mesh/model_parallel=4"])  # n_heads 2
try:
    with tempfile.TemporaryDirectory() as root, configuration(full):
        GPTTrainer(ExecutionSpec.local(root, "bad"))
except Exception as e:
    out["bad"] = str(e)
print("RESULT " + json.dumps(out))
"""


def test_mesh_layouts_shard_params_and_agree(tmp_path: Path) -> None:
    config = tmp_path / "tiny.yaml"
    from .helpers import TINY_YAML

    config.write_text(TINY_YAML)
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=4 "
        "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
        "JAX_PLATFORMS": "cpu",
    }
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(s for s in done.stdout.splitlines() if s.startswith("RESULT "))
    raw = json.loads(line.removeprefix("RESULT "))
    assert raw.pop("bad").startswith("architecture/n_heads: 2 is not divisible")
    res = {int(k): v for k, v in raw.items()}
    assert res[1]["mesh"] == {"data": 4, "model": 1}
    assert res[2]["mesh"] == {"data": 2, "model": 2}
    # fc kernel is (embed, mlp) = (32, 128): mlp → model axis, embed replicated.
    assert res[2]["fc_spec"] == ["None", "model"] and res[2]["mu_spec"] == ["None", "model"]
    assert res[2]["fc_shard_shape"] == [32, 64] and res[4]["fc_shard_shape"] == [32, 32]
    # Losses agree across layouts (n_heads differs for mp=4, so compare 1 with 2 only).
    for mp in (2,):
        for a, b in zip(res[1]["losses"], res[mp]["losses"], strict=True):
            assert abs(a - b) < 1e-4, (mp, res[1]["losses"], res[mp]["losses"])
