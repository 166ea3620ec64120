"""The emulator's fixtures (``tests.k8semu.fixtures``) and the helpers its tests share."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from kubernetes import client

from tests.k8semu.fixtures import k8s_client, k8semu, k8semu_factory, kubeconfig

__all__ = ["k8s_client", "k8semu", "k8semu_factory", "kubeconfig"]

T = TypeVar("T")
GROUP, VERSION = "batch.volcano.sh", "v1alpha1"
NS = "tcl"


def wait_for(fn: Callable[[], T | None], timeout_s: float = 15.0, what: str = "") -> T:
    """Poll ``fn`` every 50 ms until it returns something truthy."""
    deadline = time.monotonic() + timeout_s
    while True:
        out = fn()
        if out:
            return out
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what or fn}")
        time.sleep(0.05)


def vcjob(
    name: str,
    script: str,
    *,
    replicas: int = 2,
    gpus: int = 0,
    policies: list[dict[str, str]] | None = None,
    volumes: list[dict[str, Any]] | None = None,
    mounts: list[dict[str, Any]] | None = None,
    queue: str = "default",
) -> dict[str, Any]:
    """A vcjob as tcl writes one: task ``worker`` of ``replicas`` pods, env + svc plugins."""
    container: dict[str, Any] = {
        "name": "main",
        "image": "python:3.11",
        "command": ["sh", "-c", script],
        "volumeMounts": mounts or [],
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"tcl/run": name}},
        "spec": {
            "minAvailable": replicas,
            "queue": queue,
            "schedulerName": "volcano",
            "plugins": {"env": [], "svc": []},
            "policies": policies or [],
            "tasks": [
                {
                    "name": "worker",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [container],
                            "volumes": volumes or [],
                        }
                    },
                }
            ],
        },
    }


class Jobs:
    """The CustomObjectsApi calls for vcjobs in namespace ``tcl``."""

    def __init__(self, api: client.ApiClient, ns: str = NS) -> None:
        self.co = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.ns = ns

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        out = cast(
            dict[str, Any],
            self.co.create_namespaced_custom_object(GROUP, VERSION, self.ns, "jobs", body),
        )
        return out

    def get(self, name: str) -> dict[str, Any]:
        out = cast(
            dict[str, Any],
            self.co.get_namespaced_custom_object(GROUP, VERSION, self.ns, "jobs", name),
        )
        return out

    def delete(self, name: str) -> dict[str, Any]:
        out = cast(
            dict[str, Any],
            self.co.delete_namespaced_custom_object(GROUP, VERSION, self.ns, "jobs", name),
        )
        return out

    def phase(self, name: str) -> str:
        return str(self.get(name).get("status", {}).get("state", {}).get("phase", ""))

    def wait_phase(self, name: str, *phases: str, timeout_s: float = 15.0) -> dict[str, Any]:
        def done() -> dict[str, Any] | None:
            job = self.get(name)
            return job if job["status"]["state"]["phase"] in phases else None

        return wait_for(done, timeout_s, f"{name} in {phases}")

    def pods(self, name: str) -> list[dict[str, Any]]:
        """The job's pods (by label), as JSON dicts (the client's models are all-Optional)."""
        items = self.core.list_namespaced_pod(
            self.ns, label_selector=f"volcano.sh/job-name={name}"
        ).items
        out: list[dict[str, Any]] = self.core.api_client.sanitize_for_serialization(items)
        return sorted(out, key=lambda p: str(p["metadata"]["name"]))

    def pod(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = self.core.api_client.sanitize_for_serialization(
            self.core.read_namespaced_pod(name, self.ns)
        )
        return out
