"""tcl.jobs.distributed: the job's place read from the runner's variables, handed to JAX."""

from __future__ import annotations

from typing import Any

import pytest

from tcl.jobs import distributed
from tcl.jobs.batchsize import single_process_env
from tcl.jobs.distributed import Topology, initialize, topology_from_env
from tcl.jobs.errors import DistributedError
from tcl.jobs.status import status_file_name

NODE_1 = {"TCL_NODES": "2", "TCL_NODE_RANK": "1", "TCL_COORDINATOR": "10.0.0.1:61447"}


class FakeJax:
    """``jax.distributed``'s initialize and is_initialized, recording the calls."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, already: bool = False) -> None:
        self.calls: list[dict[str, Any]] = []
        self.up = already
        # named by string: jax is imported here, when a test runs, not at collection
        monkeypatch.setattr("jax.distributed.initialize", self.initialize)
        monkeypatch.setattr("jax.distributed.is_initialized", lambda: self.up)

    def initialize(self, **kwargs: Any) -> None:
        self.calls.append(kwargs)
        self.up = True


def test_one_node_needs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeJax(monkeypatch)
    for env in ({}, {"TCL_NODES": "1", "TCL_NODE_RANK": "0"}):
        topology = initialize(env)
        assert topology == Topology(0, 1, None, None, joined=False)
        assert topology.main_process
    assert fake.calls == []


def test_several_nodes_join_with_explicit_arguments_and_no_auto_detection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeJax(monkeypatch)
    env = {**NODE_1, "JAX_LOCAL_DEVICE_IDS": "0,1,2,3"}
    topology = initialize(env, initialization_timeout_s=60)
    assert topology == Topology(1, 2, "10.0.0.1:61447", (0, 1, 2, 3), joined=True)
    assert not topology.main_process
    assert fake.calls == [
        {
            "coordinator_address": "10.0.0.1:61447",
            "num_processes": 2,
            "process_id": 1,
            "local_device_ids": [0, 1, 2, 3],
            # else, under SLURM, JAX limits the process to GPU $SLURM_LOCALID (jax#16788)
            "cluster_detection_method": "deactivate",
            "initialization_timeout": 60,
        }
    ]


def test_a_second_call_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeJax(monkeypatch)
    first = initialize(NODE_1)
    assert initialize(NODE_1) == first
    assert len(fake.calls) == 1


def test_a_runtime_already_up_is_joined_as_is(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeJax(monkeypatch, already=True)
    assert initialize(NODE_1).joined
    assert fake.calls == []


def test_the_coordinator_may_be_jaxs_own_variable() -> None:
    env = {"TCL_NODES": "2", "TCL_NODE_RANK": "0", "JAX_COORDINATOR_ADDRESS": "node1:61447"}
    assert topology_from_env(env).coordinator == "node1:61447"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"TCL_NODES": "two"}, r"\$TCL_NODES='two' is not a whole number >= 1"),
        ({"TCL_NODES": "2", "TCL_COORDINATOR": "h:1"}, r"\$TCL_NODE_RANK is not set"),
        ({**NODE_1, "TCL_NODE_RANK": "2"}, r"\$TCL_NODE_RANK=2 must be below \$TCL_NODES=2"),
        ({"TCL_NODES": "2", "TCL_NODE_RANK": "0"}, r"neither \$TCL_COORDINATOR nor"),
        ({**NODE_1, "TCL_COORDINATOR": "10.0.0.1"}, r"'10.0.0.1' is not host:port"),
        ({**NODE_1, "JAX_LOCAL_DEVICE_IDS": "0,x"}, r"\$JAX_LOCAL_DEVICE_IDS='0,x'"),
    ],
)
def test_a_missing_or_bad_variable_is_named(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    fake = FakeJax(monkeypatch)
    with pytest.raises(DistributedError, match=named):
        initialize(env)
    assert fake.calls == []


def test_too_late_to_join_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(**kwargs: Any) -> None:
        raise RuntimeError("jax.distributed.initialize() must be called before any JAX calls")

    FakeJax(monkeypatch)
    monkeypatch.setattr("jax.distributed.initialize", refuse)
    with pytest.raises(DistributedError, match="cannot join the 2-process job as process 1"):
        initialize(NODE_1)


def test_by_default_the_process_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in NODE_1.items():
        monkeypatch.setenv(name, value)
    assert distributed.topology_from_env().process_id == 1


def test_each_node_keeps_its_own_status_record_beside_the_runs() -> None:
    assert [status_file_name(i) for i in (0, 1, 7)] == [
        "metadata.json",
        "metadata.node-1.json",
        "metadata.node-7.json",
    ]


def test_a_batch_size_probe_is_a_job_of_its_own() -> None:
    env = {**NODE_1, "JAX_COORDINATOR_ADDRESS": "10.0.0.1:61447", "PATH": "/bin"}
    probe = single_process_env(env)
    assert probe == {"TCL_NODES": "1", "TCL_NODE_RANK": "0", "PATH": "/bin"}
    assert topology_from_env(probe).num_processes == 1
