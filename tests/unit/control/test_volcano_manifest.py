"""The Volcano Job tcl writes: valid against the real CRD, every key where it belongs, and the
dry-run YAML round-trips."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import yaml

from tcl.control.backends.volcano.manifest import (
    MAX_JOB_NAME_CHARS,
    PodPlan,
    VolcanoRun,
    helper_pod_manifest,
    plan_pods,
    render_yaml,
    spec_secret_manifest,
    vcjob_manifest,
    vcjob_name,
)
from tcl.control.config import VolcanoHost, parse_config
from tcl.control.errors import ConfigError


def validate_vcjob(body: dict[str, Any]) -> list[str]:
    """The real CRD's verdict; its jsonschema checker takes a second to import, so it is
    imported when a test runs, not at collection."""
    from tests.k8semu.crd import validate_vcjob

    return validate_vcjob(body)


# Seed 000's k8s-cluster host, every key set, plus the keys this issue adds.
FULL = """\
clusters:
  hpc: {root: /mnt/data/tcl}
hosts:
  k8s-cluster:
    type: volcano
    cluster: hpc
    namespace: training
    queue: gpu-queue
    image: my-registry/train:latest
    pvc_name: training-pvc
    pvc_mount_path: /workspace
    chips:
      h100: 8
    num_nodes: 1
    gpus_per_node: 8
    gpu_resource_key: nvidia.com/gpu
    cpu: "32"
    memory: 256Gi
    shm_size: 64Gi
    priority_class: high-priority
    kubeconfig: ~/.kube/config
    context: my-cluster
    rdma: true
    rdma_per_node: 8
    node_selector:
      gpu-type: h100
    tolerations:
      - key: nvidia.com/gpu
        operator: Exists
        effect: NoSchedule
    env:
      NCCL_DEBUG: INFO
    service_account: trainer
    max_retry: 5
    ssh: true
    runner_port: 10991
"""

MINIMAL = """\
hosts:
  k8s:
    type: volcano
    image: train:1
    pvc_name: pvc
"""


def host_of(text: str) -> VolcanoHost:
    (host,) = parse_config(text).hosts.values()
    assert isinstance(host, VolcanoHost)
    return host


RUN = VolcanoRun(
    run_id="gpt-small-a1b2c3",
    attempt=0,
    code_sha256="ab" * 32,
    spec_secret="tcl-gpt-small-a1b2c3-0-spec",
    name="gpt small",
    env={"WANDB_MODE": "offline"},
)


def full_job(n_gpus: int = 16) -> dict[str, Any]:
    host = host_of(FULL)
    return vcjob_manifest(host, plan_pods(host, "h100", n_gpus), RUN)


def pod_spec(job: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = job["spec"]["tasks"][0]["template"]["spec"]
    return spec


def env_of(job: dict[str, Any]) -> dict[str, Any]:
    env = pod_spec(job)["containers"][0]["env"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env}


@pytest.mark.parametrize("n_gpus", [0, 4, 8, 16, 64])
def test_full_config_manifests_validate_against_the_crd(n_gpus: int) -> None:
    assert validate_vcjob(full_job(n_gpus)) == []


@pytest.mark.parametrize("n_gpus", [0, 1, 16])
def test_minimal_config_manifests_validate_against_the_crd(n_gpus: int) -> None:
    host = host_of(MINIMAL.replace("pvc_name: pvc", "pvc_name: pvc\n    gpus_per_node: 8"))
    job = vcjob_manifest(host, plan_pods(host, None, n_gpus), RUN)
    assert validate_vcjob(job) == []


def test_plan_16_h100_at_8_per_node_is_2_pods_of_8() -> None:
    host = host_of(FULL)
    assert plan_pods(host, "H100", 16) == PodPlan(replicas=2, gpus_per_pod=8)
    assert plan_pods(host, "h100", 4) == PodPlan(replicas=1, gpus_per_pod=4)
    assert plan_pods(host, "h100", 12) == PodPlan(replicas=2, gpus_per_pod=6)
    with pytest.raises(ConfigError, match="no GPUs per node"):
        plan_pods(host_of(MINIMAL), None, 8)


def test_job_level_keys() -> None:
    job = full_job()
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1"
    assert job["kind"] == "Job"
    assert job["metadata"] == {
        "name": "tcl-gpt-small-a1b2c3-0",
        "namespace": "training",
        "labels": {"tcl.run-id": "gpt-small-a1b2c3", "tcl.attempt": "0"},
        "annotations": {"tcl.run-name": "gpt small"},
    }
    spec = job["spec"]
    assert spec["schedulerName"] == "volcano"
    assert spec["queue"] == "gpu-queue"
    assert spec["minAvailable"] == 2  # gang: every pod or none
    assert spec["maxRetry"] == 5
    assert spec["priorityClassName"] == "high-priority"
    assert spec["plugins"] == {"svc": ["--publish-not-ready-addresses"], "env": [], "ssh": []}
    assert spec["policies"] == [
        {"event": "PodEvicted", "action": "RestartJob"},
        {"event": "PodFailed", "action": "TerminateJob"},
    ]
    (task,) = spec["tasks"]
    assert (task["name"], task["replicas"], task["minAvailable"]) == ("worker", 2, 2)
    assert task["template"]["metadata"]["labels"] == job["metadata"]["labels"]


def test_pod_keys() -> None:
    job = full_job()
    pod = pod_spec(job)
    assert pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"] == {"gpu-type": "h100"}
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert pod["priorityClassName"] == "high-priority"
    assert pod["serviceAccountName"] == "trainer"
    (c,) = pod["containers"]
    assert c["image"] == "my-registry/train:latest"
    amounts = {
        "nvidia.com/gpu": "8",
        "rdma/rdma_shared_device_a": "8",
        "cpu": "32",
        "memory": "256Gi",
    }
    assert c["resources"] == {"limits": amounts, "requests": amounts}
    assert c["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert c["ports"] == [{"name": "runner", "containerPort": 10991, "protocol": "TCP"}]
    assert pod["volumes"] == [
        {"name": "work", "persistentVolumeClaim": {"claimName": "training-pvc"}},
        {"name": "spec", "secret": {"secretName": RUN.spec_secret, "defaultMode": 0o400}},
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
    ]
    assert c["volumeMounts"] == [
        {"name": "work", "mountPath": "/workspace"},
        {"name": "spec", "mountPath": "/etc/tcl", "readOnly": True},
        {"name": "shm", "mountPath": "/dev/shm"},
    ]


def test_runner_command_and_env() -> None:
    job = full_job()
    (c,) = pod_spec(job)["containers"]
    assert c["command"] == [
        "tcl-runner",
        "batch",
        "--spec",
        "/etc/tcl/spec.json",
        "--code",
        f"/workspace/tcl/code/{'ab' * 32}.tar.gz",
        "--serve",
        "0.0.0.0:10991",
        "--linger-s",
        "60",
        "--echo-events",
        "--state-dir",
        "/workspace/tcl/runs/gpt-small-a1b2c3/0/r$(TCL_RESTART_COUNT)/$(POD_NAME)",
    ]
    assert env_of(job) == {
        "NCCL_DEBUG": "INFO",
        "WANDB_MODE": "offline",
        "TCL_NODES": "2",
        "TCL_RUN_ID": "gpt-small-a1b2c3",
        "TCL_COORDINATOR": "tcl-gpt-small-a1b2c3-0-worker-0.tcl-gpt-small-a1b2c3-0:61440",
        "POD_IP": {"fieldRef": {"fieldPath": "status.podIP"}},
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "TCL_RESTART_COUNT": {
            "fieldRef": {"fieldPath": "metadata.annotations['volcano.sh/job-retry-count']"}
        },
        "TCL_RUNNER_SSH_ENV_FILE": (
            "/workspace/tcl/runs/gpt-small-a1b2c3/0/r$(TCL_RESTART_COUNT)/$(POD_NAME)/shell-env.sh"
        ),
    }


def test_user_env_cannot_override_tcl_variables() -> None:
    host = host_of(FULL)
    run = VolcanoRun("r-1", 0, "0" * 64, "s", env={"TCL_NODES": "9", "POD_IP": "x"})
    job = vcjob_manifest(host, PodPlan(2, 8), run)
    names = [e["name"] for e in pod_spec(job)["containers"][0]["env"]]
    assert len(names) == len(set(names)), names
    env = env_of(job)
    assert env["TCL_NODES"] == "2"
    assert env["POD_IP"] == {"fieldRef": {"fieldPath": "status.podIP"}}


def test_minimal_config_leaves_optional_keys_out() -> None:
    job = vcjob_manifest(host_of(MINIMAL), PodPlan(replicas=1, gpus_per_pod=0), RUN)
    assert job["spec"]["queue"] == "default"
    assert job["spec"]["maxRetry"] == 3
    assert job["spec"]["plugins"] == {"svc": ["--publish-not-ready-addresses"], "env": []}
    assert job["metadata"]["namespace"] == "default"
    pod = pod_spec(job)
    for key in ("nodeSelector", "tolerations", "priorityClassName", "serviceAccountName"):
        assert key not in pod
    (c,) = pod["containers"]
    assert "resources" not in c and "securityContext" not in c
    assert [v["name"] for v in pod["volumes"]] == ["work", "spec"]  # no shm_size: no /dev/shm


def test_cli_overrides_image_and_namespace() -> None:
    run = VolcanoRun("r", 1, "0" * 64, "s", image="other:2", namespace="team-b")
    job = vcjob_manifest(host_of(MINIMAL), PodPlan(1, 0), run)
    assert job["metadata"]["namespace"] == "team-b"
    assert pod_spec(job)["containers"][0]["image"] == "other:2"


def test_no_image_is_a_config_error() -> None:
    host = host_of(MINIMAL.replace("    image: train:1\n", ""))
    with pytest.raises(ConfigError, match="image"):
        vcjob_manifest(host, PodPlan(1, 0), RUN)


@pytest.mark.parametrize(
    ("run_id", "attempt"),
    [("gpt-small-a1b2c3", 0), ("My_Run.v2-abcdef", 3), ("x" * 40 + "-abcdef", 12)],
)
def test_job_names_are_dns_labels_short_enough_for_pod_hostnames(run_id: str, attempt: int) -> None:
    name = vcjob_name(run_id, attempt)
    assert len(name) <= MAX_JOB_NAME_CHARS
    assert len(f"{name}-worker-9999999") <= 63
    host = host_of(MINIMAL)
    job = vcjob_manifest(host, PodPlan(1, 0), VolcanoRun(run_id, attempt, "0" * 64, "s"))
    assert validate_vcjob(job) == []
    assert name.endswith(f"-{attempt}")


def test_long_run_ids_stay_distinct() -> None:
    a, b = "x" * 60 + "-aaaaaa", "x" * 60 + "-bbbbbb"
    assert vcjob_name(a, 0) != vcjob_name(b, 0)


def test_dry_run_yaml_round_trips_in_order() -> None:
    job = full_job()
    text = render_yaml(job)
    assert yaml.safe_load(text) == job
    assert list(yaml.safe_load(text)) == ["apiVersion", "kind", "metadata", "spec"]
    assert list(yaml.safe_load(text)["spec"])[:2] == ["schedulerName", "queue"]
    assert text.startswith("apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\n")


def test_helper_pod() -> None:
    pod = helper_pod_manifest(host_of(FULL), "tcl-code-abab")
    assert pod["apiVersion"] == "v1" and pod["kind"] == "Pod"
    assert pod["metadata"] == {
        "name": "tcl-code-abab",
        "namespace": "training",
        "labels": {"tcl.helper": "code"},
    }
    (c,) = pod["spec"]["containers"]
    assert c["command"] == ["sleep", "3600"]
    assert c["image"] == "my-registry/train:latest"
    assert c["volumeMounts"] == [{"name": "work", "mountPath": "/workspace"}]
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["volumes"] == [
        {"name": "work", "persistentVolumeClaim": {"claimName": "training-pvc"}}
    ]


def test_spec_secret() -> None:
    body = json.dumps({"run_id": "r"}).encode()
    secret = spec_secret_manifest("tcl-r-0-spec", "ns", body, {"tcl.run-id": "r"})
    assert secret["kind"] == "Secret" and secret["type"] == "Opaque"
    assert base64.b64decode(secret["data"]["spec.json"]) == body
