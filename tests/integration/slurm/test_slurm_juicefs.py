"""A SLURM cluster whose root is a JuiceFS volume: each node's runner mounts it before the job.

The SLURM testbed's slurmd "nodes" run on this machine, in its own mount namespace, so a node's
mount is this test's too: what a job wrote is read back here through a mount of the test's own,
and the directory under the mount point stays empty (the files are in the volume). The volume
is the one of scripts/testbed/juicefs-up.sh (Redis with a password, file storage).
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tcl.clusterfs_node import mounted_fstype
from tcl.shim.api import ClusterFs
from tcl.shim.clusterfs import ClusterMounts
from tests.integration.slurm.test_e2e_slurm import VENV, Env
from tests.testbed import JuicefsVolume, SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.slurm, pytest.mark.juicefs]
PY = sys.executable

WRITE = """\
import os, sys
p = os.path.join(os.environ["TCL_OUT_DIR"], "shared", sys.argv[1])
os.makedirs(os.path.dirname(p), exist_ok=True)
open(p, "w").write(sys.argv[2])
print("wrote", p, flush=True)
"""


@pytest.fixture(scope="module")
def jfs(
    slurm_cluster: SlurmCluster, juicefs_volume: JuicefsVolume,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Env, str]]:  # fmt: skip
    base = tmp_path_factory.mktemp("slurm-jfs")
    home, repo = base / "home", base / "repo"
    home.mkdir()
    repo.mkdir()
    (repo / "write.py").write_text(WRITE)
    work = slurm_cluster.base / "jobs" / f"work-{uuid.uuid4().hex[:8]}"
    root = f"/mnt/tcl-jfs-slurm-{uuid.uuid4().hex[:8]}"
    config = base / "config.yaml"
    config.write_text(f"""
clusters:
  ci: {{work: {work}, root: {root}, mount: '{juicefs_volume.mount_url()}'}}
hosts:
  hpc:
    type: slurm
    ssh: {slurm_cluster.host}
    ssh_config_file: {slurm_cluster.ssh_config}
    cluster: ci
    runner_venv: {VENV}
    connect_timeout_s: 5
    partitions: [{{name: gpu, default: true}}]
""")
    config.chmod(0o600)
    try:
        yield Env(home, config, repo, slurm_cluster), root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_each_job_finds_the_root_mounted_and_the_last_one_out_unmounts_it(
    jfs: tuple[Env, str], juicefs_volume: JuicefsVolume
) -> None:
    env, root = jfs
    res = env.tcl("submit", "--", PY, "write.py", "one.txt", "from-slurm", timeout=240)
    assert f"wrote {root}/shared/one.txt" in res.stdout, res.stdout + res.stderr
    (run,) = env.tcl_json("ps", "-a")
    assert run["state"] == "succeeded", run
    # the job's node unmounted it when the job (its only user) ended; what it wrote is in the
    # volume, not in the directory under the mount point
    assert mounted_fstype(root) is None
    assert list(Path(root).iterdir()) == []
    fs = ClusterFs(meta_url=juicefs_volume.meta_url, meta_password=juicefs_volume.password,
                   mount_point=root, unmount_after_idle_s=None)  # fmt: skip
    state = Path(tempfile.mkdtemp(prefix="tcl-test-jfs-"))
    asyncio.run(ClusterMounts(state).acquire("reader", fs))
    try:
        assert Path(root, "shared", "one.txt").read_text() == "from-slurm"
    finally:
        juicefs = str(Path(VENV) / "bin" / "juicefs")
        subprocess.run([juicefs, "umount", "--force", root], check=False, capture_output=True)
        shutil.rmtree(state, ignore_errors=True)


def test_a_wrong_password_fails_the_job_with_one_line(
    jfs: tuple[Env, str], juicefs_volume: JuicefsVolume
) -> None:
    env, root = jfs
    bad = env.config.read_text().replace(
        juicefs_volume.mount_url(), juicefs_volume.mount_url(password="not-the-password")
    )
    config = env.config.with_name("bad.yaml")
    config.write_text(bad)
    config.chmod(0o600)
    bad_env = Env(env.home, config, env.repo, env.cluster)
    res = bad_env.tcl("submit", "--", PY, "write.py", "two.txt", "x", check=False, timeout=240)
    assert res.returncode != 0, res.stdout + res.stderr
    out = res.stdout + res.stderr
    assert "wrong password for the metadata engine" in out, out
    assert "wrote" not in out and "not-the-password" not in out
    assert mounted_fstype(root) is None
