"""Secrets, PersistentVolumeClaims (read-only, from the emulator's config) and Volcano queues."""

from __future__ import annotations

import base64
import copy
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from tests.k8semu import errors
from tests.k8semu.resources import PVCS, QUEUES, SECRETS, list_body, new_meta, status_success
from tests.k8semu.responses import as_json

if TYPE_CHECKING:  # no import cycle at runtime
    from tests.k8semu.app import Api


class ObjectRoutes:
    def __init__(self, api: Api) -> None:
        self.api = api

    async def create_secret(self, request: Request) -> Response:
        ns = self.api.guard(request, SECRETS, "create")
        body = await self.api.body(request)
        meta = self.api.named(body, ns, SECRETS)
        data = dict(body.get("data") or {})
        for k, v in (body.pop("stringData", None) or {}).items():
            data[k] = base64.b64encode(str(v).encode()).decode()
        with self.api.c.lock:
            if (ns, meta["name"]) in self.api.c.secrets:
                raise errors.already_exists(SECRETS, meta["name"])
            obj = {
                **body,
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": new_meta(meta, ns),
                "data": data,
                "type": body.get("type", "Opaque"),
            }
            self.api.c.secrets[(ns, meta["name"])] = obj
            return as_json(copy.deepcopy(obj), 201)

    async def get_secret(self, request: Request) -> Response:
        ns = self.api.guard(request, SECRETS, "get")
        name = request.path_params["name"]
        with self.api.c.lock:
            if (ns, name) not in self.api.c.secrets:
                raise errors.not_found(SECRETS, name)
            return as_json(copy.deepcopy(self.api.c.secrets[(ns, name)]))

    async def delete_secret(self, request: Request) -> Response:
        ns = self.api.guard(request, SECRETS, "delete")
        name = request.path_params["name"]
        with self.api.c.lock:
            obj = self.api.c.secrets.pop((ns, name), None)
        if obj is None:
            raise errors.not_found(SECRETS, name)
        return as_json(status_success(SECRETS, name, obj["metadata"]["uid"]))

    def pvc_obj(self, ns: str, name: str) -> dict[str, Any]:
        uid = self.api.pvc_uids[(ns, name)]
        modes = ["ReadWriteMany"]
        return {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": uid,
                "resourceVersion": "1",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {"k8semu/host-path": str(self.api.config.pvcs[(ns, name)])},
            },
            "spec": {
                "accessModes": modes,
                "resources": {"requests": {"storage": "100Gi"}},
                "storageClassName": "k8semu-hostpath",
                "volumeMode": "Filesystem",
                "volumeName": f"pvc-{uid}",
            },
            "status": {"phase": "Bound", "accessModes": modes, "capacity": {"storage": "100Gi"}},
        }

    async def get_pvc(self, request: Request) -> Response:
        ns = self.api.guard(request, PVCS, "get")
        name = request.path_params["name"]
        if (ns, name) not in self.api.config.pvcs:
            raise errors.not_found(PVCS, name)
        return as_json(self.pvc_obj(ns, name))

    async def list_pvcs(self, request: Request) -> Response:
        ns = self.api.guard(request, PVCS, "list")
        items = [self.pvc_obj(n, name) for n, name in self.api.config.pvcs if n == ns]
        return as_json(list_body(PVCS, items))

    def queue_obj(self, name: str) -> dict[str, Any]:
        q = self.api.ctl.queues.get(name)
        if q is None:
            raise errors.not_found(QUEUES, name)
        with self.api.c.lock:
            held = self.api.ctl.queues.allocated(q)
            counts = self.api.ctl.queues.counts(q)
        return {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {
                "name": name,
                "uid": f"{abs(hash(name)):032x}"[:32],
                "resourceVersion": "1",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "generation": 1,
            },
            "spec": {
                "capability": {k: str(v) for k, v in q.capability.items()},
                "reclaimable": True,
                "weight": 1,
            },
            "status": {
                "state": "Open",
                "allocated": {k: f"{v:g}" for k, v in held.items()},
                "reservation": {},
                **counts,
            },
        }

    async def get_queue(self, request: Request) -> Response:
        self.api.guard(request, QUEUES, "get")
        return as_json(self.queue_obj(request.path_params["name"]))

    async def list_queues(self, request: Request) -> Response:
        self.api.guard(request, QUEUES, "list")
        items = [self.queue_obj(q.name) for q in self.api.config.queues]
        return as_json(list_body(QUEUES, items))
