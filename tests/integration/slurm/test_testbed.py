"""The SLURM testbed itself (scripts/testbed/slurm-up.sh): login node, nodes, GRES, jobs."""

from __future__ import annotations

import asyncio
import shlex
import sys
import time
import uuid
from pathlib import Path

import asyncssh
import pytest

from tests.testbed import SlurmCluster, charliecloud_image

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

CLIENTS = ("sinfo", "squeue", "sbatch", "scancel", "scontrol", "srun", "sacct")


def ok(cluster: SlurmCluster, command: str) -> str:
    proc = cluster.ssh(command)
    assert proc.returncode == 0, f"{command}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_login_node_and_cluster_layout(slurm_cluster: SlurmCluster) -> None:
    c = slurm_cluster
    assert (c.host, c.nodes, c.gres) == ("slurm-login", ("node1", "node2"), "gpu:h100:4")
    assert c.partitions == ("gpu", "preempt", "spot", "urgent")
    out = ok(c, "sinfo -h -N -o '%N %R %G %T'")
    rows = {tuple(line.split()) for line in out.splitlines()}
    assert rows == {
        (n, p, "gpu:h100:4", "idle") for n in ("node1", "node2") for p in c.partitions
    }, out
    assert ok(c, "sinfo -h -o '%R %a' -p gpu").split() == ["gpu", "up"]
    # what a backend needs in a plain non-interactive session
    env = ok(c, f"command -v {' '.join(CLIENTS)} python3 uv ch-run; echo $SLURM_CONF; echo $USER")
    *paths, slurm_conf, user = env.split()
    assert len(paths) == len(CLIENTS) + 3, env
    assert (slurm_conf, user) == (str(c.slurm_conf), "root")
    ver = ok(c, "python3 -c 'import sys; print(*sys.version_info[:2])'").split()
    assert tuple(map(int, ver)) == sys.version_info[:2]


async def test_gpu_batch_job_writes_to_the_shared_filesystem(slurm_cluster: SlurmCluster) -> None:
    c = slurm_cluster
    out = c.base / "jobs" / f"gpu-{uuid.uuid4().hex[:8]}-%j.out"
    script = "echo $CUDA_VISIBLE_DEVICES $SLURM_JOB_PARTITION $USER"
    async with asyncssh.connect(c.host, config=[str(c.ssh_config)]) as conn:
        submit = await conn.run(
            f"sbatch --parsable -p gpu --gres=gpu:h100:2 -o {out} --wrap {shlex.quote(script)}",
            check=True,
        )
        job = str(submit.stdout).strip()
        deadline = time.monotonic() + 30
        while True:
            state = await conn.run(f"squeue -h -t all -j {job} -o %T", check=True)
            if str(state.stdout).strip() == "COMPLETED":
                break
            assert time.monotonic() < deadline, f"job {job}: {state.stdout!r}"
            await asyncio.sleep(0.2)
    path = Path(str(out).replace("%j", job))
    assert path.read_text().split() == ["0,1", "gpu", "root"]


def test_two_node_step(slurm_cluster: SlurmCluster) -> None:
    out = ok(
        slurm_cluster,
        "srun -p gpu -N 2 --ntasks-per-node=1 bash -c 'echo $SLURM_PROCID $SLURMD_NODENAME'",
    )
    assert sorted(out.split("\n")[:-1]) == ["0 node1", "1 node2"], out


def test_charliecloud_container_in_a_job(slurm_cluster: SlurmCluster, base_image: str) -> None:
    c = slurm_cluster
    image = charliecloud_image(base_image, c.base.parent / "charliecloud" / "pybase")
    shared = c.base / "jobs" / f"ch-{uuid.uuid4().hex[:8]}"
    shared.mkdir()
    code = "import os; open('/mnt/out', 'w').write(os.environ['SLURM_PROCID'])"
    ok(c, f"srun -p gpu -N 1 ch-run -b {shared}:/mnt {image} -- python3 -c {shlex.quote(code)}")
    assert (shared / "out").read_text() == "0"
