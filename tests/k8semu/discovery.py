"""Discovery documents: ``/api``, ``/api/v1``, ``/apis`` and the Volcano group versions."""

from __future__ import annotations

from typing import Any

_RW = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def _res(name: str, kind: str, namespaced: bool, verbs: list[str], **kw: Any) -> dict[str, Any]:
    return {
        "name": name,
        "singularName": "",
        "namespaced": namespaced,
        "kind": kind,
        "verbs": verbs,
        **kw,
    }


def api_versions(server: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server}],
    }


def core_v1() -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            _res("persistentvolumeclaims", "PersistentVolumeClaim", True, _RW, shortNames=["pvc"]),
            _res("pods", "Pod", True, _RW, shortNames=["po"], categories=["all"]),
            _res("pods/exec", "PodExecOptions", True, ["create", "get"]),
            _res("pods/log", "Pod", True, ["get"]),
            _res("pods/portforward", "PodPortForwardOptions", True, ["create", "get"]),
            _res("pods/status", "Pod", True, ["get", "patch", "update"]),
            _res("secrets", "Secret", True, _RW),
        ],
    }


GROUPS = {
    "batch.volcano.sh": "v1alpha1",
    "scheduling.volcano.sh": "v1beta1",
}


def api_groups(volcano: bool) -> dict[str, Any]:
    groups = []
    if volcano:
        for name, version in GROUPS.items():
            gv = {"groupVersion": f"{name}/{version}", "version": version}
            groups.append({"name": name, "versions": [gv], "preferredVersion": gv})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def group_version(group: str) -> dict[str, Any] | None:
    if group == "batch.volcano.sh":
        resources = [
            _res("jobs", "Job", True, _RW, shortNames=["vcjob", "vj"], singularName="job"),
            _res("jobs/status", "Job", True, ["get", "patch", "update"]),
        ]
    elif group == "scheduling.volcano.sh":
        resources = [
            _res("podgroups", "PodGroup", True, _RW, shortNames=["pg", "podgroup-v1beta1"]),
            _res("queues", "Queue", False, _RW, shortNames=["q", "queue-v1beta1"]),
            _res("queues/status", "Queue", False, ["get", "patch", "update"]),
        ]
    else:
        return None
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{GROUPS[group]}",
        "resources": resources,
    }
