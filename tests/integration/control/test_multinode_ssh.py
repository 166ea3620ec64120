"""One job on two SSH hosts of one cluster: two JAX CPU processes joined by jax.distributed.

Hosts ``n0`` and ``n1`` are the sshd testbed's network namespaces ``infra-h1`` (10.213.0.11) and
``infra-h2`` (10.213.0.12), reached through the 127.0.0.1:2222 sshd as a jump host, each with a
shim (process executor) from `tcl host setup`. Node 0's runner is told it is the coordinator;
node 1 reaches it across the bridge, as two machines on a LAN would.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.control.sshlab import (
    VENV,
    Env,
    cleanup,
    free_port,
    git,
    stop_shims,
)
from tests.testbed import SshTestbed

pytestmark = pytest.mark.integration

# Each node's process joins the job (its coordinator and rank from tcl's env).
JOIN = """
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
PSUM = (
    JOIN
    + """
import jax.numpy as jnp
rank = jax.process_index()
total = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(jnp.array([rank + 1.0]))
print(f"rank {rank} of {jax.process_count()} psum {float(total[0])}", flush=True)
jax.distributed.shutdown()
"""
)


# One of two processes stops stepping (a planted hang, attempt 0 only); the other blocks in its
# next collective. Each reports its steps (tcl.jobs.heartbeat); rank 0 keeps a "checkpoint" (a
# step number on the disk both hosts share) that the next attempt resumes from.
HANG = (
    JOIN
    + """
import pathlib, time
import jax.numpy as jnp
import tcl.jobs
rank, attempt = jax.process_index(), int(os.environ["TCL_ATTEMPT"])
ckpt = pathlib.Path(os.environ["CKPT"])
start = int(ckpt.read_text()) if ckpt.exists() else 0
print(f"rank {rank} attempt {attempt} resumes at {start}", flush=True)
psum = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")

def planted_hang():
    time.sleep(3600)

for step in range(start, 30):
    if attempt == 0 and rank == 1 and step == 12:
        planted_hang()
    float(psum(jnp.array([1.0]))[0])  # rank 0 waits here for rank 1
    if rank == 0 and step % 5 == 0:
        ckpt.write_text(str(step))
    tcl.jobs.heartbeat(step)
    time.sleep(0.1)
print(f"rank {rank} done", flush=True)
jax.distributed.shutdown()
"""
)


@pytest.fixture(scope="module")
def pair(
    ssh_testbed: SshTestbed, docker_client: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("pair")
    home, repo = root / "home", root / "repo"
    home.mkdir()
    repo.mkdir()
    shim_dirs = {"n0": root / "shim-n0", "n1": root / "shim-n1"}
    tb = ssh_testbed
    common = (
        f"user: root, identity_file: {tb.key}, known_hosts: {tb.known_hosts}, "
        f"ssh_config_file: {tb.config}, connect_timeout_s: 3, shim_venv: {VENV}, "
        f'proxy_jump: "127.0.0.1:2222", cluster: pair, executor: process'
    )
    config = root / "config.yaml"
    config.write_text(f"""
clusters: {{pair: {{}}}}
hosts:
  n0: {{type: ssh, ssh: 10.213.0.11, {common}, shim_port: {free_port()},
       shim_dir: {shim_dirs["n0"]}}}
  n1: {{type: ssh, ssh: 10.213.0.12, {common}, shim_port: {free_port()},
       shim_dir: {shim_dirs["n1"]}}}
""")
    env = Env(home, config, repo, shim_dirs)
    git(repo, "init", "-q")
    (repo / "psum.py").write_text(PSUM)
    (repo / "hang.py").write_text(HANG)
    try:
        for host in shim_dirs:
            env.tcl("host", "setup", host, "--json")
        yield env
    finally:
        cleanup(env, docker_client)
        stop_shims(shim_dirs.values())


def test_two_nodes_one_job_psum_across_hosts(pair: Env) -> None:
    python = str(Path(sys.executable))
    res = pair.tcl("submit", "--nodes", "2", "--", python, "psum.py", timeout=300)
    assert "started on pair, 2 nodes" in res.stderr, res.stderr
    lines = sorted(line for line in res.stdout.splitlines() if "psum" in line)
    # each node's line, prefixed with its node; 1 + 2 summed across the two processes
    assert lines == ["[node 0] rank 0 of 2 psum 3.0", "[node 1] rank 1 of 2 psum 3.0"], res
    (run,) = [r for r in json.loads(pair.tcl("ps", "-a", "--json").stdout)]
    assert run["state"] == "succeeded" and run["host"] == "pair"
    only = pair.tcl("logs", run["run_id"], "--node", "1").stdout
    assert "rank 1 of 2 psum 3.0" in only and "rank 0" not in only


def test_dry_run_prints_the_plan_and_starts_nothing(pair: Env) -> None:
    before = json.loads(pair.tcl("ps", "-a", "--json").stdout)
    res = pair.tcl("submit", "--dry-run", "--nodes", "2", "--", "python", "psum.py")
    assert "plan 1 (ssh, starts now): pair: 2 nodes, CPU per node" in res.stdout
    assert '"multinode": true' in res.stdout and '"node_rank": 1' in res.stdout
    assert json.loads(pair.tcl("ps", "-a", "--json").stdout) == before


def test_a_planted_hang_on_one_node_is_found_both_stacks_are_kept_and_the_retry_resumes(
    pair: Env, tmp_path: Path
) -> None:
    """Issue 33: one node stops stepping, the other blocks in a collective. Found within the
    limit (max(3 x the median step, the floor): 2 s here), both nodes' stacks in `tcl logs`,
    the attempt `hung`, and the retry resumes from the checkpoint and finishes."""
    python = str(Path(sys.executable))
    ckpt = tmp_path / "ckpt"
    hang_env = ["--env", "TCL_HANG_FLOOR_S=2", "--env", f"CKPT={ckpt}"]
    argv = ["submit", "--nodes", "2", "--retry", "2", *hang_env, "--", python, "hang.py"]
    res = pair.tcl(*argv, timeout=300, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    runs = json.loads(pair.tcl("ps", "-a", "--json").stdout)
    run = max(runs, key=lambda r: r["created_at"])
    assert run["state"] == "succeeded", run
    causes = [(a["attempt"], a["state"], a["cause"]) for a in run["attempts"]]
    assert causes[0] == (0, "failed", "hung") and causes[-1][1:] == ("succeeded", "exit"), causes
    logs = pair.tcl("logs", run["run_id"]).stdout + pair.tcl("logs", run["run_id"]).stderr
    # the hung node's stacks (where it stopped) and its peer's (waiting in the collective)
    hung_at = [ln for ln in logs.splitlines() if "planted_hang" in ln]
    assert hung_at and all(ln.startswith("[node 1]") for ln in hung_at), logs[-4000:]
    assert re.search(r"\[node 0\].*Fatal Python error: Aborted", logs), logs[-4000:]
    assert re.search(r"\[node 0\] +File .*hang\.py", logs), logs[-4000:]
    # found within the limit (2 s: the floor, over 3 x a 0.1-0.2 s step), give or take a poll
    found = [float(x) for x in re.findall(r"no step for (\d+) s \(the limit: 2 s", logs)]
    assert found and min(found) <= 4, logs[-4000:]
    resumed = re.findall(r"rank (\d) attempt 1 resumes at (\d+)", logs)
    assert sorted(r for r, _ in resumed) == ["0", "1"] and all(int(s) >= 5 for _, s in resumed)
    assert "rank 0 done" in logs and "rank 1 done" in logs
