"""Where a runner's job sits: the spec's cluster completed from the scheduler's environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from tcl.runner.api import ClusterInfo, JobSpec, LogStream
from tcl.runner.client import RunnerClient
from tcl.runner.cluster import resolve_placement
from tcl.runner.errors import InvalidSpec
from tcl.runner.service import Runner, RunnerConfig

from .conftest import PY
from .test_app import collect

SHARED = JobSpec(run_id="r", argv=["true"])  # one spec file for every node (SLURM, Volcano)
SLURM_TASK_1 = {
    "SLURM_JOB_ID": "7",
    "SLURM_PROCID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_LOCALID": "0",
    "TCL_COORDINATOR": "10.0.0.1:61447",
}


def test_srun_tasks_take_their_rank_and_count_from_slurm() -> None:
    p = resolve_placement(SHARED, SLURM_TASK_1)
    assert (p.source, p.attempt) == ("slurm", 0)
    assert p.cluster == ClusterInfo(node_rank=1, nodes=2, coordinator="10.0.0.1:61447")


def test_a_volcano_pod_takes_its_task_index_and_the_manifests_node_count() -> None:
    env = {"VC_TASK_INDEX": "3", "TCL_NODES": "4", "TCL_COORDINATOR": "job-worker-0.job:8476"}
    p = resolve_placement(SHARED, env)
    assert p.source == "volcano"
    assert p.cluster == ClusterInfo(node_rank=3, nodes=4, coordinator="job-worker-0.job:8476")


def test_a_plain_exported_rank_and_count_are_taken_first() -> None:
    env = {**SLURM_TASK_1, "TCL_NODE_RANK": "0", "TCL_NODES": "3"}
    p = resolve_placement(SHARED, env)
    assert (p.source, p.cluster.node_rank, p.cluster.nodes) == ("tcl", 0, 3)


def test_the_coordinator_may_come_as_jax_coordinator_address() -> None:
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "JAX_COORDINATOR_ADDRESS": "node1:61447"}
    assert resolve_placement(SHARED, env).cluster.coordinator == "node1:61447"


def test_a_spec_with_several_nodes_wins_over_the_environment() -> None:
    spec = JobSpec(
        run_id="r", argv=["true"], cluster=ClusterInfo(node_rank=2, nodes=3, coordinator="h:1")
    )
    p = resolve_placement(spec, SLURM_TASK_1)
    assert p.source == "spec"
    assert p.cluster == ClusterInfo(node_rank=2, nodes=3, coordinator="h:1")


def test_a_spec_without_a_coordinator_takes_the_environments() -> None:
    spec = JobSpec(run_id="r", argv=["true"], cluster=ClusterInfo(node_rank=1, nodes=2))
    assert resolve_placement(spec, SLURM_TASK_1).cluster.coordinator == "10.0.0.1:61447"


def test_a_requeued_slurm_job_sees_its_restart_count_as_attempt() -> None:
    assert resolve_placement(SHARED, {**SLURM_TASK_1, "SLURM_RESTART_COUNT": "2"}).attempt == 2
    later = SHARED.model_copy(update={"attempt": 5})
    assert resolve_placement(later, {"SLURM_RESTART_COUNT": "2"}).attempt == 5


def test_nothing_said_is_one_node() -> None:
    for env in (
        {"PATH": "/bin", "VC_TASK_INDEX": "0"},  # a Volcano pod of a job tcl did not spread
        {"SLURM_PROCID": "", "SLURM_NTASKS": "2", "SLURM_RESTART_COUNT": " "},  # empty: unset
    ):
        p = resolve_placement(SHARED, env)
        assert (p.source, p.cluster, p.attempt) == ("single", ClusterInfo(), 0), env


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"SLURM_PROCID": "one", "SLURM_NTASKS": "2"}, "SLURM_PROCID='one'"),
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "0"}, "SLURM_NTASKS='0'"),
        ({"SLURM_PROCID": "2", "SLURM_NTASKS": "2"}, "SLURM_PROCID=2 is not below SLURM_NTASKS=2"),
        ({"SLURM_RESTART_COUNT": "-1"}, "SLURM_RESTART_COUNT='-1'"),
        ({"TCL_NODES": "2"}, "TCL_NODES=2 but no node rank"),
    ],
)
def test_a_scheduler_env_that_makes_no_sense_is_refused_naming_the_variable(
    env: dict[str, str], named: str
) -> None:
    with pytest.raises(InvalidSpec, match=named) as caught:
        resolve_placement(SHARED, env)
    assert caught.value.field == "cluster"


def test_the_runner_refuses_such_a_spec_at_submit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_PROCID", "3")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    runner = Runner(RunnerConfig(state_dir=tmp_path))
    try:
        with pytest.raises(InvalidSpec, match="SLURM_PROCID=3"):
            runner.submit(SHARED)
        assert runner.spec is None
    finally:
        runner.close()


async def test_served_each_node_runs_with_the_place_its_spec_gives(
    client: RunnerClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The shim path: a spec per node, with an explicit cluster; the host's env says nothing.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    show = "TCL_NODE_RANK TCL_NODES TCL_COORDINATOR JAX_COORDINATOR_ADDRESS JAX_LOCAL_DEVICE_IDS"
    prog = f"import os; print(*(os.environ.get(k) for k in {show.split()!r}))"
    cluster = ClusterInfo(node_rank=1, nodes=2, coordinator="10.0.0.1:8476")
    await client.submit(JobSpec(run_id="r", argv=[PY, "-c", prog], cluster=cluster))
    await client.run()
    text, _, exit_code = await collect(client)
    assert exit_code == 0
    assert text[LogStream.STDOUT] == "1 2 10.0.0.1:8476 10.0.0.1:8476 0,1\n"
    assert "node 1 of 2 (spec), coordinator 10.0.0.1:8476, attempt 0" in text[LogStream.RUNNER]


def test_a_volcano_pod_finds_its_coordinator_in_the_svc_plugins_hosts() -> None:
    env = {
        "VC_TASK_INDEX": "1",
        "TCL_NODES": "2",
        "TCL_COORDINATOR_PORT": "8476",
        "VC_WORKER_HOSTS": "tcl-r-0-worker-0.tcl-r-0,tcl-r-0-worker-1.tcl-r-0",
        "TCL_RESTART_COUNT": "2",
    }
    p = resolve_placement(JobSpec(run_id="r", argv=["true"]), env)
    assert (p.source, p.cluster.node_rank, p.cluster.nodes) == ("volcano", 1, 2)
    assert p.cluster.coordinator == "tcl-r-0-worker-0.tcl-r-0:8476"
    assert p.attempt == 2  # Volcano restarted the job twice: its third attempt
