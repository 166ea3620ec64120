"""A 2-node JAX job as SLURM runs it: two real ``tcl-runner batch`` processes side by side, one
shared spec file and code tarball, each told its place only by srun's variables; the job joins
``jax.distributed`` on CPU (gloo) and sums across both processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tcl.runner.api import CodeRef, JobSpec
from tcl.runner.events import EventLog
from tests.integration.runner.test_batch import write_spec
from tests.unit.runner.conftest import sha, tarball

RUNNER = [sys.executable, "-m", "tcl.runner.main", "batch"]

# One CPU device per process; each process adds its rank + 1 into one global array, so the
# global sum is 1 + 2 = 3 only if both processes took part.
GLOBAL_SUM = """
import numpy as np
from jax._src import xla_bridge
from jax.sharding import Mesh, NamedSharding, PartitionSpec

mesh = Mesh(np.array(jax.devices()), ("p",))
rank, count = jax.process_index(), jax.process_count()
local = np.full((1,), rank + 1, dtype=np.float32)
spread = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec("p")), local)
total = jax.jit(lambda a: a.sum(), out_shardings=NamedSharding(mesh, PartitionSpec()))(spread)
print(
    f"rank={rank} process_count={count} sum={float(total)} attempt={os.environ['TCL_ATTEMPT']}"
    f" cuda_devices={xla_bridge.CUDA_VISIBLE_DEVICES.value}",
    flush=True,
)
"""
HELPER_JOB = """
import os
import jax
jax.config.update("jax_num_cpu_devices", 1)
import tcl.jobs.distributed
tcl.jobs.distributed.initialize(initialization_timeout_s=60)
"""
PLAIN_JOB = """
import os
import jax
jax.config.update("jax_num_cpu_devices", 1)
jax.distributed.initialize(
    coordinator_address=os.environ["TCL_COORDINATOR"],
    num_processes=int(os.environ["TCL_NODES"]),
    process_id=int(os.environ["TCL_NODE_RANK"]),
    initialization_timeout=60,
)
"""


@dataclass
class NodeRun:
    returncode: int
    status: dict[str, object]
    stdout: str
    runner_lines: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def run_two_nodes(tmp_path: Path, job: str, extra_env: dict[str, str]) -> list[NodeRun]:
    """The job on 2 "nodes": srun's per-task variables, the batch script's TCL_COORDINATOR."""
    code = tarball({"job.py": (job + GLOBAL_SUM).encode()})
    (tmp_path / "code.tgz").write_bytes(code)
    spec = JobSpec(
        run_id="mn",
        argv=[sys.executable, "job.py"],
        code=CodeRef(sha256=sha(code), size=len(code)),
    )
    spec_path = write_spec(tmp_path, spec)
    base = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    base.update(
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
        SLURM_JOB_ID="4242",
        SLURM_STEP_NODELIST="node[1-2]",
        SLURM_NTASKS="2",
        SLURM_LOCALID="0",
        TCL_COORDINATOR=f"127.0.0.1:{free_port()}",
        **extra_env,
    )
    procs = []
    for rank in (0, 1):
        argv = [*RUNNER, "--spec", str(spec_path), "--code", str(tmp_path / "code.tgz")]
        argv += ["--state-dir", str(tmp_path / f"task-{rank}")]
        env = {**base, "SLURM_PROCID": str(rank), "SLURMD_NODENAME": f"node{rank + 1}"}
        procs.append(subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True))
    runs = []
    try:
        for rank, proc in enumerate(procs):
            _, stderr = proc.communicate(timeout=120)
            state_dir = tmp_path / f"task-{rank}"
            events, _ = EventLog(state_dir / "events").read(0, 10_000)
            runs.append(
                NodeRun(
                    proc.returncode,
                    json.loads((state_dir / "status.json").read_text()),
                    "".join(e.data or "" for e in events if e.stream == "stdout"),
                    "".join(e.data or "" for e in events if e.stream == "runner") + stderr,
                )
            )
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return runs


def assert_both_summed(runs: list[NodeRun], attempt: int, cuda_devices: str) -> None:
    for rank, run in enumerate(runs):
        detail = f"node {rank}:\n{run.stdout}\n{run.runner_lines}"
        assert (run.returncode, run.status["state"]) == (0, "succeeded"), detail
        want = f"rank={rank} process_count=2 sum=3.0 attempt={attempt} cuda_devices={cuda_devices}"
        assert want in run.stdout, detail


def test_two_batch_runners_make_one_jax_job_through_tcl_jobs(tmp_path: Path) -> None:
    runs = run_two_nodes(tmp_path, HELPER_JOB, {"SLURM_RESTART_COUNT": "1"})
    # The requeue's restart count is the attempt; every device of the node stays JAX's.
    assert_both_summed(runs, attempt=1, cuda_devices="all")
    assert "node 1 of 2 (slurm), coordinator 127.0.0.1:" in runs[1].runner_lines


@pytest.mark.parametrize("gpus", ["0,1", "6,7"])
def test_two_batch_runners_make_one_jax_job_from_the_documented_variables(
    tmp_path: Path, gpus: str
) -> None:
    # As with srun --gres=gpu:2: JAX gets both GPUs of its node, by CUDA's numbering, where its
    # SLURM auto-detection alone would keep only GPU $SLURM_LOCALID ("0"). On this CPU-only
    # machine the setting reaches JAX and changes nothing else.
    runs = run_two_nodes(tmp_path, PLAIN_JOB, {"CUDA_VISIBLE_DEVICES": gpus})
    assert_both_summed(runs, attempt=0, cuda_devices="0,1")
