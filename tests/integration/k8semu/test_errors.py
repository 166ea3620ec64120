"""Refusals as the API server sends them: 403, 404, 409, 422, 400, 401, and a missing PVC."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.integration.k8semu.conftest import GROUP, NS, Jobs, vcjob, wait_for
from tests.k8semu import K8sEmulator
from tests.k8semu.fixtures import Factory, new_client

pytestmark = pytest.mark.volcano


def _refusal(exc: pytest.ExceptionInfo[ApiException]) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.value.body or "")
    assert body["kind"] == "Status" and body["status"] == "Failure"
    assert body["code"] == exc.value.status
    return body


def test_forbidden_namespace(k8s_client: client.ApiClient) -> None:
    jobs = Jobs(k8s_client, ns="other")
    with pytest.raises(ApiException) as exc:
        jobs.create(vcjob("f1", "true"))
    body = _refusal(exc)
    assert body["reason"] == "Forbidden" and exc.value.status == 403
    assert body["message"] == (
        'jobs.batch.volcano.sh is forbidden: User "system:serviceaccount:tcl:tcl" cannot create '
        'resource "jobs" in API group "batch.volcano.sh" in the namespace "other"'
    )
    with pytest.raises(ApiException) as exc:
        jobs.core.read_namespaced_pod_log("p", "other")
    assert _refusal(exc)["message"].startswith('pods "p" is forbidden: User ')
    assert (
        'cannot get resource "pods/log" in API group "" in the namespace "other"'
        in (_refusal(exc)["message"])
    )


def test_volcano_not_installed(k8semu_factory: Factory, tmp_path: Path) -> None:
    emu = k8semu_factory(volcano_installed=False)
    api = new_client(emu.write_kubeconfig(tmp_path / "kc"))
    with pytest.raises(ApiException) as exc:
        Jobs(api).create(vcjob("n1", "true"))
    body = _refusal(exc)
    assert exc.value.status == 404 and body["reason"] == "NotFound"
    assert body["message"] == "the server could not find the requested resource"
    groups = client.ApisApi(api).get_api_versions().groups
    assert GROUP not in [g.name for g in groups]
    with pytest.raises(ApiException) as exc:
        client.CustomObjectsApi(api).list_cluster_custom_object(
            "scheduling.volcano.sh", "v1beta1", "queues"
        )
    assert exc.value.status == 404
    assert client.CoreV1Api(api).list_namespaced_pod(NS).items == []


def test_second_create_conflicts(k8s_client: client.ApiClient) -> None:
    jobs = Jobs(k8s_client)
    jobs.create(vcjob("c1", "sleep 30", replicas=1))
    with pytest.raises(ApiException) as exc:
        jobs.create(vcjob("c1", "sleep 30", replicas=1))
    body = _refusal(exc)
    assert exc.value.status == 409 and body["reason"] == "AlreadyExists"
    assert body["message"] == 'jobs.batch.volcano.sh "c1" already exists'
    assert body["details"] == {"name": "c1", "group": GROUP, "kind": "jobs"}


def test_validator_refusal_is_422(k8semu_factory: Factory, tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []

    def validate(body: dict[str, Any]) -> list[str]:
        seen.append(body)
        return ['spec.tasks[0].replicas: Invalid value: "two": must be an integer']

    emu = k8semu_factory(validate=validate)
    api = new_client(emu.write_kubeconfig(tmp_path / "kc"))
    with pytest.raises(ApiException) as exc:
        Jobs(api).create(vcjob("v1", "true"))
    body = _refusal(exc)
    assert exc.value.status == 422 and body["reason"] == "Invalid"
    assert body["message"] == (
        'Job.batch.volcano.sh "v1" is invalid: '
        'spec.tasks[0].replicas: Invalid value: "two": must be an integer'
    )
    assert seen[0]["spec"]["tasks"][0]["name"] == "worker"
    with pytest.raises(ApiException):
        Jobs(api).get("v1")


def test_default_check_unknown_queue_and_bad_token(
    k8semu: K8sEmulator, k8s_client: client.ApiClient, tmp_path: Path
) -> None:
    jobs = Jobs(k8s_client)
    bad = vcjob("d1", "true")
    bad["spec"]["tasks"] = []
    with pytest.raises(ApiException) as exc:
        jobs.create(bad)
    assert exc.value.status == 422 and "spec.tasks" in _refusal(exc)["message"]
    with pytest.raises(ApiException) as exc:
        jobs.create(vcjob("d2", "true", queue="nope"))
    assert exc.value.status == 400
    assert _refusal(exc)["message"] == (
        'admission webhook "validatejob.volcano.sh" denied the request: unable to find job '
        'queue: queues.scheduling.volcano.sh "nope" not found'
    )
    with pytest.raises(ApiException) as exc:
        jobs.get("d3")
    assert exc.value.status == 404
    assert _refusal(exc)["message"] == 'jobs.batch.volcano.sh "d3" not found'
    kc = k8semu.write_kubeconfig(tmp_path / "kc2")
    kc.write_text(kc.read_text().replace(k8semu.config.token, "wrong"))
    other = new_client(kc)
    with pytest.raises(ApiException) as exc:
        client.CoreV1Api(other).list_namespaced_pod(NS)
    assert exc.value.status == 401


def test_missing_pvc_keeps_the_pod_pending(k8s_client: client.ApiClient) -> None:
    jobs = Jobs(k8s_client)
    vol = {"name": "ws", "persistentVolumeClaim": {"claimName": "missing"}}
    jobs.create(
        vcjob(
            "m1",
            "true",
            replicas=1,
            volumes=[vol],
            mounts=[{"name": "ws", "mountPath": "/workspace"}],
        )
    )

    def pending() -> str | None:
        pods = jobs.pods("m1")
        if pods and pods[0]["status"].get("conditions"):
            return str(pods[0]["status"]["conditions"][0]["message"])
        return None

    assert 'persistentvolumeclaim "missing" not found' in wait_for(pending)
    assert jobs.phase("m1") == "Pending"
    with pytest.raises(ApiException) as exc:
        jobs.core.read_namespaced_persistent_volume_claim("missing", NS)
    assert exc.value.status == 404
    pvc = jobs.core.read_namespaced_persistent_volume_claim("workspace", NS)
    assert pvc.status is not None and pvc.status.phase == "Bound"
