"""One job on two SSH hosts of one cluster: two JAX CPU processes joined by jax.distributed.

Hosts ``n0`` and ``n1`` are the sshd testbed's network namespaces ``infra-h1`` (10.213.0.11) and
``infra-h2`` (10.213.0.12), reached through the 127.0.0.1:2222 sshd as a jump host, each with a
shim (process executor) from `tcl host setup`. Node 0's runner is told it is the coordinator;
node 1 reaches it across the bridge, as two machines on a LAN would.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.control.test_e2e_ssh import (
    VENV,
    Env,
    _cleanup,
    _free_port,
    _git,
    stop_shims,
)
from tests.testbed import SshTestbed

pytestmark = pytest.mark.integration

PSUM = """
import os
import jax
jax.config.update("jax_num_cpu_devices", 1)
jax.distributed.initialize(
    coordinator_address=os.environ["TCL_COORDINATOR"],
    num_processes=int(os.environ["TCL_NODES"]),
    process_id=int(os.environ["TCL_NODE_RANK"]),
    initialization_timeout=60,
)
import jax.numpy as jnp
rank = jax.process_index()
total = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(jnp.array([rank + 1.0]))
print(f"rank {rank} of {jax.process_count()} psum {float(total[0])}", flush=True)
jax.distributed.shutdown()
"""


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
  n0: {{type: ssh, ssh: 10.213.0.11, {common}, shim_port: {_free_port()},
       shim_dir: {shim_dirs["n0"]}}}
  n1: {{type: ssh, ssh: 10.213.0.12, {common}, shim_port: {_free_port()},
       shim_dir: {shim_dirs["n1"]}}}
""")
    env = Env(home, config, repo, shim_dirs)
    _git(repo, "init", "-q")
    (repo / "psum.py").write_text(PSUM)
    try:
        for host in shim_dirs:
            env.tcl("host", "setup", host, "--json")
        yield env
    finally:
        _cleanup(env, docker_client)
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
