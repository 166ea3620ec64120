"""End to end through the real `tcl` command on the SLURM testbed (`slurm_cluster`).

The config is what a user writes: a `slurm` host reached over SSH to the login node, a cluster
whose `work` is on the shared filesystem. tcl's runner on the cluster is this checkout's venv
(`runner_venv`, the filesystem is shared, like `shim_venv` in the ssh tests); the job's own
python is named in its argv (this checkout's, which has JAX): a plain argv job runs with the
node's PATH, never inside the runner's venv.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.tclcli import TCL, TclEnv, run_tcl
from tests.testbed import SlurmCluster
from tests.uvproject import GROUP, GROUP_DEP, make_project

pytestmark = [pytest.mark.integration, pytest.mark.slurm]

VENV = str(Path(sys.executable).parent.parent)
PY = sys.executable

PSUM = """
import os, jax, jax.numpy as jnp
jax.config.update("jax_num_cpu_devices", 1)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # cache even this one
jax.distributed.initialize(coordinator_address=os.environ["TCL_COORDINATOR"],
                           num_processes=int(os.environ["TCL_NODES"]),
                           process_id=int(os.environ["TCL_NODE_RANK"]), initialization_timeout=60)
rank = jax.process_index()
f = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")
print(f"rank {rank}/{jax.process_count()} psum={float(f(jnp.array([float(rank + 1)]))[0])}",
      flush=True)
cache = os.environ["JAX_COMPILATION_CACHE_DIR"]
print(f"cache {cache} holds {len(os.listdir(cache))}", flush=True)
jax.distributed.shutdown()
"""


@dataclass
class Env(TclEnv):
    cluster: SlurmCluster

    def squeue(self) -> list[str]:
        out = self.cluster.ssh("squeue -h -o '%i %T %j'").stdout
        return [line for line in out.splitlines() if line.strip()]

    def wait_state(self, run_id: str, states: set[str], timeout_s: float = 60) -> dict[str, Any]:
        return super().wait_state(run_id, states, timeout_s)


def _config(c: SlurmCluster, work: Path, extra: str = "") -> str:
    return f"""
clusters:
  ci: {{work: {work}}}
hosts:
  hpc:
    type: slurm
    ssh: {c.host}
    ssh_config_file: {c.ssh_config}
    cluster: ci
    runner_venv: {VENV}
    connect_timeout_s: 5
    partitions: [{{name: gpu, default: true}}]
{extra}"""


@pytest.fixture(scope="module")
def e2e(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("slurm-e2e")
    home, repo = root / "home", root / "repo"
    home.mkdir()
    repo.mkdir()
    (repo / "psum.py").write_text(PSUM)
    (repo / "hello.py").write_text("import sys\nprint('hello from slurm', sys.argv[1:])\n")
    work = slurm_cluster.base / "jobs" / f"work-{uuid.uuid4().hex[:8]}"
    config = root / "config.yaml"
    config.write_text(_config(slurm_cluster, work))
    env = Env(home, config, repo, slurm_cluster)
    yield env
    runs = json.loads(env.tcl("ps", "-a", "--json", check=False).stdout or "[]")
    for r in runs:
        if r["state"] not in ("succeeded", "failed", "terminated"):
            env.tcl("stop", r["run_id"], check=False)


def test_two_nodes_one_jax_job_psum(e2e: Env) -> None:
    proc = e2e.tcl("submit", "--chip", "h100", "-n", "8", "--", PY, "psum.py", timeout=240)
    out = proc.stdout + proc.stderr
    assert "rank 0/2 psum=3.0" in out and "rank 1/2 psum=3.0" in out, out
    # JAX's compilation cache is the cluster's, in its shared work dir: a requeued attempt
    # on any node finds what this one compiled (issue 33)
    caches = re.findall(r"cache (\S+) holds (\d+)", out)
    assert len(caches) == 2 and len({c for c, _ in caches}) == 1, out
    assert caches[0][0].endswith("/tcl/jax") and all(int(n) > 0 for _, n in caches), out
    runs = e2e.tcl_json("ps", "-a")
    assert runs[0]["state"] == "succeeded", runs[0]
    logs = e2e.tcl("logs", runs[0]["run_id"]).stdout
    assert "[node 0] rank 0/2 psum=3.0" in logs and "[node 1] rank 1/2 psum=3.0" in logs, logs
    assert e2e.tcl("logs", "--node", "1", runs[0]["run_id"]).stdout.count("psum=") == 1


def test_a_uv_project_s_two_nodes_share_one_environment_built_once(
    e2e: Env, tmp_path: Path
) -> None:
    """The job's environment is built from its uv.lock in the cluster's shared `work`, once:
    the other node waits for it and reuses it (issue 30)."""
    repo = make_project(tmp_path / "uvrepo")
    offline = ["--env", "UV_PYTHON_DOWNLOADS=never", "--env", "UV_OFFLINE=1"]
    argv = ["submit", "--chip", "h100", "-n", "8", "--group", GROUP, *offline]
    res = run_tcl([*argv, "--", "python", "job.py"], e2e.env(), repo, timeout=240)
    out = res.stdout + res.stderr
    pythons = set(re.findall(r"python (\S+)", out))
    assert len(pythons) == 1 and "/tcl/envs/" in next(iter(pythons)), out
    assert out.count(f"{GROUP_DEP} yes") == 2 and out.count("dep says from") == 2, out
    assert out.count("(built in") == 1 and out.count("(reused)") == 1, out


def test_a_run_s_dir_on_the_cluster_goes_once_its_logs_are_kept(e2e: Env) -> None:
    """Issue 32's cluster hygiene: with `run_dir_retention_s: 0` the release removes the
    attempt's dir (spec, script, event logs) from the shared `work`; its logs stay readable
    from the workstation's cache."""
    pruned = e2e.config.with_name("pruned.yaml")
    text = e2e.config.read_text()
    retention = "    run_dir_retention_s: 0\n    partitions:"
    pruned.write_text(text.replace("    partitions:", retention))
    env = {**e2e.env(), "TCL_CONFIG": str(pruned)}
    work = Path(re.findall(r"work: ([^}\s]+)", text)[0])
    # code no run names, shipped two days ago: evicted by the same release
    stale = work / "tcl" / "code" / f"{'0' * 64}.tar.gz"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_bytes(b"old code")
    two_days_ago = time.time() - 2 * 86400
    os.utime(stale, (two_days_ago, two_days_ago))
    res = run_tcl(["submit", "--", "python3", "hello.py", "pruned"], env, e2e.repo, timeout=240)
    assert "hello from slurm ['pruned']" in res.stdout, res.stdout + res.stderr
    (run,) = [r for r in e2e.tcl_json("ps", "-a") if r["argv"][-1] == "pruned"]
    attempt_dir = work / "tcl" / "runs" / run["run_id"] / "0"
    deadline = time.monotonic() + 60
    while attempt_dir.exists():  # the daemon's controller releases it once all is kept
        assert time.monotonic() < deadline, sorted(p.name for p in attempt_dir.iterdir())
        time.sleep(0.3)
    logs = run_tcl(["logs", run["run_id"]], env, e2e.repo)
    assert "hello from slurm ['pruned']" in logs.stdout, logs
    assert not stale.exists()
    assert list((work / "tcl" / "code").glob("*.tar.gz"))  # this run's: shipped a moment ago


def test_bad_partition_or_gres_is_one_clear_error_and_no_job(e2e: Env) -> None:
    before = e2e.squeue()
    proc = e2e.tcl("submit", "--chip", "a100", "-n", "1", "--", "true", check=False)
    assert proc.returncode != 0
    assert "gpu:a100" in proc.stderr and "gpu:h100:4 per node" in proc.stderr, proc.stderr
    bad = e2e.config.with_name("bad.yaml")
    bad.write_text(e2e.config.read_text().replace("{name: gpu, default: true}", "{name: 'gpu x'}"))
    proc = subprocess.run(
        [TCL, "submit", "--chip", "h100", "-n", "1", "--", "true"],
        cwd=e2e.repo,
        env={**e2e.env(), "TCL_CONFIG": str(bad)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode != 0
    assert "partition gpu x not on this cluster (it has: gpu, preempt, spot, urgent)" in proc.stderr
    assert e2e.squeue() == before


def test_full_cluster_queues_then_starts_and_stop_ssh_ps(e2e: Env) -> None:
    c = e2e.cluster
    hold = c.ssh("sbatch --parsable -p gpu -N 2 --gres=gpu:h100:4 --wrap 'sleep 300'")
    holder = hold.stdout.strip()
    assert holder.isdigit(), hold.stderr
    try:
        res = e2e.tcl_json("submit", "-d", "--chip", "h100", "-n", "4", "--", PY, "hello.py", "x")
        run_id = res["run_id"]
        run = e2e.wait_state(run_id, {"queued"})
        # SLURM gives a just-submitted job the reason "None" until its next scheduling pass
        deadline = time.monotonic() + 60
        while "Resources" not in (run["message"] or "") and time.monotonic() < deadline:
            time.sleep(0.5)
            run = e2e.wait_state(run_id, {"queued"})
        assert "Resources" in (run["message"] or ""), run
    finally:
        c.ssh(f"scancel {holder}")
    e2e.wait_state(run_id, {"succeeded"})
    assert "hello from slurm ['x']" in e2e.tcl("logs", run_id).stdout
    # a long job on both nodes: ssh onto each (the documented `--node N -- CMD` form, no
    # terminal: no srun pty noise), then stop it
    res = e2e.tcl_json("submit", "-d", "--chip", "h100", "-n", "8", "--", "sleep", "300")
    run_id = res["run_id"]
    e2e.wait_state(run_id, {"running"})
    on = []
    for node in ("0", "1"):
        cmd = ("ssh", run_id, "--node", node, "--", "echo", "on", "$SLURMD_NODENAME")
        proc = e2e.tcl(*cmd, timeout=60)
        assert proc.stdout.startswith("on node"), proc
        assert "srun: error" not in proc.stderr and "TIOCGWINSZ" not in proc.stderr, proc.stderr
        on.append(proc.stdout.strip())
    assert on[0] != on[1], on  # two nodes
    e2e.tcl("stop", run_id)
    run = e2e.wait_state(run_id, {"terminated"})
    assert run["state"] == "terminated"
    assert not [line for line in e2e.squeue() if "RUNNING" in line and f"tcl-{run_id}" in line]
