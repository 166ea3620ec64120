"""HTTP surface: the Kubernetes API paths tcl uses, and test-only routes under ``/emulator/``.

Every API route goes through ``Api.guard``: bearer token (401), RBAC by namespace (403 with
the real message), then "is Volcano installed" (404 ``the server could not find the requested
resource``). Handlers raise ``ApiError``; one wrapper renders it as a ``Status`` body.
"""

from __future__ import annotations

import asyncio
import copy
import json
import secrets as pysecrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute

from tests.k8semu import discovery, errors, streams
from tests.k8semu.cluster import Cluster, JobRecord, PodRecord
from tests.k8semu.errors import ApiError
from tests.k8semu.objects import ObjectRoutes
from tests.k8semu.resources import (
    ANY,
    PODS,
    VCJOBS,
    Resource,
    field_filter,
    list_body,
    match_fields,
    match_labels,
    new_meta,
    normalize_pod_spec,
    now,
    parse_selector,
    status_success,
)
from tests.k8semu.responses import as_json
from tests.k8semu.volcano import Controller

Handler = Callable[[Request], Awaitable[Response]]
CORE = "/api/v1/namespaces/{ns}"
VC = "/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs"
QUEUE_PATH = "/apis/scheduling.volcano.sh/v1beta1/queues"


class Api:
    def __init__(self, cluster: Cluster, controller: Controller, server: str) -> None:
        self.c = cluster
        self.ctl = controller
        self.config = cluster.config
        self.server = server
        self.pvc_uids = {key: f"{abs(hash(key)):032x}"[:32] for key in self.config.pvcs}

    def guard(self, conn: HTTPConnection, res: Resource, verb: str, sub: str = "") -> str:
        """Authenticate, authorize and route-check a request; its namespace ('' if none)."""
        auth = conn.headers.get("authorization", "")
        if auth != f"Bearer {self.config.token}":
            raise errors.unauthorized()
        ns = str(conn.path_params.get("ns", ""))
        if res.namespaced and ns not in self.config.namespaces:
            name = conn.path_params.get("name")
            raise errors.forbidden(res, verb, self.config.user, ns, name, sub)
        if res.group and not self.config.volcano_installed:
            raise errors.no_route()
        if verb == "list" and conn.query_params.get("watch") in ("true", "1"):
            # not emulated: fail loudly rather than answer a List the watcher cannot parse
            raise errors.bad_request("k8semu does not serve watch requests")
        return ns

    def fields(self, res: Resource, request: Request) -> list[tuple[tuple[str, str], str, str]]:
        try:
            return field_filter(res, request.query_params.get("fieldSelector"))
        except ValueError as err:
            raise errors.bad_request(str(err)) from err

    async def body(self, request: Request) -> dict[str, Any]:
        raw = await request.body()
        try:
            out = json.loads(raw)
        except ValueError as err:
            raise errors.bad_request(f"json: cannot unmarshal request body: {err}") from err
        if not isinstance(out, dict):
            raise errors.bad_request("the body must be a JSON object")
        return out

    def named(self, body: dict[str, Any], ns: str, res: Resource) -> dict[str, Any]:
        meta = dict(body.get("metadata") or {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + pysecrets.token_hex(3)[:5]
        if not meta.get("name"):
            raise errors.invalid(
                res, "", ["metadata.name: Required value: name or generateName is required"]
            )
        if meta.get("namespace") and meta["namespace"] != ns:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on "
                "the request"
            )
        return meta

    # --- vcjobs ------------------------------------------------------------------------------

    def job(self, ns: str, name: str) -> JobRecord:
        rec = self.c.jobs.get((ns, name))
        if rec is None:
            raise errors.not_found(VCJOBS, name)
        return rec

    async def create_job(self, request: Request) -> Response:
        ns = self.guard(request, VCJOBS, "create")
        body = await self.body(request)
        meta = self.named(body, ns, VCJOBS)
        spec = copy.deepcopy(body.get("spec") or {})
        # Volcano's mutating webhook (mutate_job.go) fills these before validation
        if isinstance(spec.get("tasks"), list):
            spec.setdefault("queue", "default")
            spec.setdefault("schedulerName", "volcano")
            spec.setdefault("maxRetry", 3)
            total = 0
            for i, t in enumerate(spec["tasks"]):
                if isinstance(t, dict):
                    t.setdefault("name", f"default{i}")
                    t.setdefault("replicas", 1)
                    t.setdefault("minAvailable", t["replicas"])
                    total += int(t["replicas"]) if isinstance(t["replicas"], int) else 0
            spec.setdefault("minAvailable", total)
        obj = {**body, "metadata": meta, "spec": spec}
        obj.pop("status", None)
        problems = self.config.validate(copy.deepcopy(obj))
        if problems:
            raise errors.invalid(VCJOBS, meta["name"], problems)
        if self.ctl.queues.get(spec["queue"]) is None:
            queue = f'queues.scheduling.volcano.sh "{spec["queue"]}" not found'
            raise errors.webhook_denied(
                "validatejob.volcano.sh", f"unable to find job queue: {queue}"
            )
        with self.c.lock:
            if (ns, meta["name"]) in self.c.jobs:
                raise errors.already_exists(VCJOBS, meta["name"])
            obj["metadata"] = new_meta(meta, ns)
            served = copy.deepcopy(obj)
            t = now()
            obj["status"] = {
                "state": {"phase": "Pending", "lastTransitionTime": t},
                "conditions": [{"status": "Pending", "lastTransitionTime": t}],
                "minAvailable": spec["minAvailable"],
                "retryCount": 0,
                "version": 0,
            }
            self.c.jobs[(ns, meta["name"])] = JobRecord(obj)
        return as_json(served, 201)

    async def get_job(self, request: Request) -> Response:
        ns = self.guard(request, VCJOBS, "get")
        with self.c.lock:
            return as_json(copy.deepcopy(self.job(ns, request.path_params["name"]).obj))

    async def list_jobs(self, request: Request) -> Response:
        ns = self.guard(request, VCJOBS, "list")
        sel = parse_selector(request.query_params.get("labelSelector"))
        fields = self.fields(VCJOBS, request)
        with self.c.lock:
            items = [
                copy.deepcopy(j.obj)
                for (n, _), j in self.c.jobs.items()
                if n == ns and match_labels(j.obj, sel) and match_fields(j.obj, fields)
            ]
        return as_json(list_body(VCJOBS, items))

    async def delete_job(self, request: Request) -> Response:
        ns = self.guard(request, VCJOBS, "delete")
        name = request.path_params["name"]
        with self.c.lock:
            rec = self.job(ns, name)
            del self.c.jobs[(ns, name)]
            for pod in list(self.c.pods.values()):
                if pod.namespace == ns and pod.job == name:
                    self.c.stop_pod(pod, delete=True)
        return as_json(status_success(VCJOBS, name, rec.obj["metadata"]["uid"]))

    # --- pods --------------------------------------------------------------------------------

    def pod(self, ns: str, name: str) -> PodRecord:
        rec = self.c.pods.get((ns, name))
        if rec is None:
            raise errors.not_found(PODS, name)
        return rec

    async def create_pod(self, request: Request) -> Response:
        ns = self.guard(request, PODS, "create")
        body = await self.body(request)
        meta = self.named(body, ns, PODS)
        if not (body.get("spec") or {}).get("containers"):
            raise errors.invalid(PODS, meta["name"], ["spec.containers: Required value"])
        with self.c.lock:
            if (ns, meta["name"]) in self.c.pods:
                raise errors.already_exists(PODS, meta["name"])
            pod = {**body, "apiVersion": "v1", "kind": "Pod", "metadata": new_meta(meta, ns)}
            pod["spec"] = normalize_pod_spec(copy.deepcopy(body["spec"]))
            rec = self.c.add_pod(pod)
            return as_json(copy.deepcopy(rec.obj), 201)

    async def get_pod(self, request: Request) -> Response:
        ns = self.guard(request, PODS, "get")
        with self.c.lock:
            return as_json(copy.deepcopy(self.pod(ns, request.path_params["name"]).obj))

    async def list_pods(self, request: Request) -> Response:
        ns = self.guard(request, PODS, "list")
        sel = parse_selector(request.query_params.get("labelSelector"))
        fields = self.fields(PODS, request)
        with self.c.lock:
            items = [
                copy.deepcopy(p.obj)
                for (n, _), p in self.c.pods.items()
                if n == ns and match_labels(p.obj, sel) and match_fields(p.obj, fields)
            ]
        return as_json(list_body(PODS, items))

    async def delete_pod(self, request: Request) -> Response:
        ns = self.guard(request, PODS, "delete")
        with self.c.lock:
            rec = self.pod(ns, request.path_params["name"])
            self.c.stop_pod(rec, delete=True)
            return as_json(copy.deepcopy(rec.obj))

    async def pod_log(self, request: Request) -> Response:
        ns = self.guard(request, PODS, "get", "log")
        name = request.path_params["name"]
        q = request.query_params
        with self.c.lock:
            rec = self.pod(ns, name)
            cname = rec.obj["spec"]["containers"][0]["name"]
            if q.get("container", cname) != cname:
                raise errors.bad_request(f"container {q['container']} is not valid for pod {name}")
            proc = rec.proc
            if proc is None:
                raise errors.bad_request(
                    f'container "{cname}" in pod "{name}" is waiting to start: ContainerCreating'
                )
        since = time.time() - float(q["sinceSeconds"]) if "sinceSeconds" in q else 0.0
        lines = [line for t, line in list(proc.lines) if t >= since]
        if "tailLines" in q:
            n = int(q["tailLines"])
            lines = lines[len(lines) - n :] if n > 0 else []
        if q.get("follow") != "true":
            return PlainTextResponse(b"".join(lines))
        start = len(proc.lines)

        async def follow() -> AsyncIterator[bytes]:
            if lines:
                yield b"".join(lines)
            i = start
            while True:
                done = proc.exit_code() is not None and proc.output_done(0)
                new = proc.lines[i:]
                if new:
                    i += len(new)
                    yield b"".join(line for _, line in new)
                elif done:
                    return
                await asyncio.sleep(0.05)

        return StreamingResponse(follow(), media_type="text/plain")

    # --- discovery and test routes -----------------------------------------------------------

    async def discover(self, request: Request) -> Response:
        self.guard(request, ANY, "get")
        path = request.url.path.rstrip("/")
        if path == "/api":
            return as_json(discovery.api_versions(self.server))
        if path == "/api/v1":
            return as_json(discovery.core_v1())
        if path == "/apis":
            return as_json(discovery.api_groups(self.config.volcano_installed))
        group = path.split("/")[2]
        doc = discovery.group_version(group)
        if doc is None or not self.config.volcano_installed:
            raise errors.no_route()
        return as_json(doc)

    async def evict(self, request: Request) -> Response:
        with self.c.lock:
            rec = self.pod(request.path_params["ns"], request.path_params["name"])
            self.c.stop_pod(rec, delete=False, evict=True)
        await asyncio.to_thread(rec.gone.wait, self.config.grace_s + 15)
        with self.c.lock:
            return as_json(copy.deepcopy(rec.obj))

    async def pod_info(self, request: Request) -> Response:
        with self.c.lock:
            rec = self.pod(request.path_params["ns"], request.path_params["name"])
            proc = rec.proc
            return as_json(
                {
                    "pid": proc.pid if proc else None,
                    "netns": proc.netns if proc else None,
                    "ip": proc.ip if proc else None,
                    "job": rec.job,
                }
            )


def build_app(api: Api) -> Starlette:
    objects = ObjectRoutes(api)

    def wrap(fn: Handler) -> Handler:
        async def run(request: Request) -> Response:
            try:
                return await fn(request)
            except ApiError as err:
                return as_json(err.body(), err.code)

        return run

    async def not_found(request: Request, exc: Exception) -> Response:
        try:
            api.guard(request, ANY, "get")
        except ApiError as err:
            return as_json(err.body(), err.code)
        return as_json(errors.no_route().body(), 404)

    r = [
        Route("/api", wrap(api.discover)),
        Route("/api/v1", wrap(api.discover)),
        Route("/apis", wrap(api.discover)),
        Route("/apis/{group}/{version}", wrap(api.discover)),
        Route(f"{CORE}/pods", wrap(api.list_pods), methods=["GET"]),
        Route(f"{CORE}/pods", wrap(api.create_pod), methods=["POST"]),
        Route(f"{CORE}/pods/{{name}}", wrap(api.get_pod), methods=["GET"]),
        Route(f"{CORE}/pods/{{name}}", wrap(api.delete_pod), methods=["DELETE"]),
        Route(f"{CORE}/pods/{{name}}/log", wrap(api.pod_log), methods=["GET"]),
        WebSocketRoute(f"{CORE}/pods/{{name}}/exec", lambda ws: streams.exec_ws(api, ws)),
        WebSocketRoute(
            f"{CORE}/pods/{{name}}/portforward", lambda ws: streams.portforward_ws(api, ws)
        ),
        Route(f"{CORE}/secrets", wrap(objects.create_secret), methods=["POST"]),
        Route(f"{CORE}/secrets/{{name}}", wrap(objects.get_secret), methods=["GET"]),
        Route(f"{CORE}/secrets/{{name}}", wrap(objects.delete_secret), methods=["DELETE"]),
        Route(f"{CORE}/persistentvolumeclaims", wrap(objects.list_pvcs), methods=["GET"]),
        Route(f"{CORE}/persistentvolumeclaims/{{name}}", wrap(objects.get_pvc), methods=["GET"]),
        Route(VC, wrap(api.list_jobs), methods=["GET"]),
        Route(VC, wrap(api.create_job), methods=["POST"]),
        Route(f"{VC}/{{name}}", wrap(api.get_job), methods=["GET"]),
        Route(f"{VC}/{{name}}/status", wrap(api.get_job), methods=["GET"]),
        Route(f"{VC}/{{name}}", wrap(api.delete_job), methods=["DELETE"]),
        Route(QUEUE_PATH, wrap(objects.list_queues), methods=["GET"]),
        Route(f"{QUEUE_PATH}/{{name}}", wrap(objects.get_queue), methods=["GET"]),
        Route("/emulator/evict/{ns}/{name}", wrap(api.evict), methods=["POST"]),
        Route("/emulator/pods/{ns}/{name}", wrap(api.pod_info), methods=["GET"]),
    ]
    app = Starlette(routes=r)
    app.add_exception_handler(404, not_found)
    return app
