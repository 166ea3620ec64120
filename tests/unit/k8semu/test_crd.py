"""The CRD validator: a good vcjob passes; each planted error gives one message naming its path."""

from __future__ import annotations

import copy
from typing import Any

import pytest


def validate_vcjob(body: dict[str, Any]) -> list[str]:
    """The real CRD's verdict; its jsonschema checker takes a second to import, so it is
    imported when a test runs, not at collection."""
    from tests.k8semu.crd import validate_vcjob

    return validate_vcjob(body)


def good_vcjob() -> dict[str, Any]:
    container = {
        "name": "worker",
        "image": "busybox",
        "command": ["sleep", "1"],
        "resources": {"limits": {"nvidia.com/gpu": 8, "cpu": "32", "memory": "256Gi"}},
        "ports": [{"containerPort": 10990, "name": "runner"}],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
    }
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "tcl-r1-0", "namespace": "training", "labels": {"tcl.run-id": "r1"}},
        "spec": {
            "schedulerName": "volcano",
            "queue": "default",
            "minAvailable": 2,
            "maxRetry": 3,
            "plugins": {"svc": ["--publish-not-ready-addresses"], "env": []},
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "tasks": [
                {
                    "name": "worker",
                    "replicas": 2,
                    "minAvailable": 2,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
                }
            ],
        },
    }


def test_a_good_vcjob_passes() -> None:
    assert validate_vcjob(good_vcjob()) == []


def test_int_or_string_takes_both() -> None:
    job = good_vcjob()
    res = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["resources"]
    res["limits"] = {"cpu": 4, "memory": "1Gi"}
    assert validate_vcjob(job) == []


def _plant(path: list[str | int], value: Any) -> dict[str, Any]:
    job = copy.deepcopy(good_vcjob())
    node: Any = job
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return job


POD: list[str | int] = ["spec", "tasks", 0, "template", "spec"]


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ([*POD, "hostNetwrok"], True, "spec.tasks[0].template.spec.hostNetwrok: unknown field"),
        (["spec", "minAvaliable"], 2, "spec.minAvaliable: unknown field"),
        (["spec", "tasks", 0, "replicas"], "two", "spec.tasks[0].replicas: 'two' is not of type"),
        (
            ["spec", "policies", 0, "action"],
            "RestartEverything",
            "spec.policies[0].action: invalid policy action 'RestartEverything'",
        ),
        (["spec", "policies", 0, "event"], "PodExploded", "spec.policies[0].event: 'PodExploded'"),
        (["spec", "minAvailable"], 3, "spec.minAvailable: 3 is greater than the total replicas 2"),
        (
            ["spec", "tasks", 0, "minAvailable"],
            3,
            "spec.tasks[0].minAvailable: 3 is greater than the task's replicas 2",
        ),
        (["metadata", "name"], "Tcl_R1", "metadata.name: 'Tcl_R1' is not a DNS-1123 label"),
        (["metadata", "name"], "a" * 64, "is not a DNS-1123 label"),
    ],
)
def test_each_planted_error_gives_one_message(
    path: list[str | int], value: Any, message: str
) -> None:
    errors = validate_vcjob(_plant(path, value))
    assert len(errors) == 1, errors
    assert errors[0].startswith(message) or message in errors[0], errors


def test_duplicate_task_names() -> None:
    job = good_vcjob()
    job["spec"]["tasks"].append(copy.deepcopy(job["spec"]["tasks"][0]))
    assert validate_vcjob(job) == ["spec.tasks[1].name: duplicated task name 'worker'"]


def test_internal_event_and_event_with_exit_code() -> None:
    job = good_vcjob()
    job["spec"]["policies"] = [
        {"event": "OutOfSync", "action": "RestartJob"},
        {"event": "PodFailed", "exitCode": 3, "action": "RestartJob"},
    ]
    assert validate_vcjob(job) == [
        "spec.policies[0]: event 'OutOfSync' is internal to Volcano",
        "spec.policies[1]: must not specify event and exitCode together",
    ]


def test_several_errors_give_several_messages() -> None:
    job = _plant([*POD, "hostNetwrok"], True)
    job["spec"]["tasks"][0]["minAvaliable"] = 1
    assert sorted(validate_vcjob(job)) == [
        "spec.tasks[0].minAvaliable: unknown field",
        "spec.tasks[0].template.spec.hostNetwrok: unknown field",
    ]
