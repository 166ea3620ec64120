"""HTTP surface: Cloud TPU API v2 under ``/v2/…``, test-only admin routes under ``/emulator/``.

Routes follow the v2 REST mapping (``tpu.v2.json``). Custom methods come as ``{id}:verb`` in
the last path segment. Every API request is logged (``GET /emulator/requests``) before it
is answered, failed ones included; the admin routes are neither logged nor authenticated.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from tests.tpuemu import schema
from tests.tpuemu.config import EmulatorConfig
from tests.tpuemu.errors import ApiError, invalid, not_found
from tests.tpuemu.nodes import NodeRecord, Nodes
from tests.tpuemu.ops import Operations
from tests.tpuemu.queued import QueuedResources

LOC = "/v2/projects/{project}/locations/{zone}"
Handler = Callable[[Request], Awaitable[Response]]


class Emulator:
    """The state behind one app: operations, nodes, queued resources, the request log."""

    def __init__(self, config: EmulatorConfig) -> None:
        self.config = config
        self.ops = Operations()
        self.nodes = Nodes(config, self.ops)
        self.queued = QueuedResources(self.nodes, self.ops)
        self.requests: list[dict[str, Any]] = []

    def location(self, request: Request) -> tuple[str, str]:
        project, zone = request.path_params["project"], request.path_params["zone"]
        if zone not in self.config.zones:
            # Unverified against the live service (no captured answer found); 404 with the
            # wording of Google's location lookups is the closest documented behaviour.
            raise ApiError("NOT_FOUND", f"Location {zone} not found or not available.")
        return project, zone

    def node_by_id(self, node_id: str) -> NodeRecord:
        for rec in self.nodes.records.values():
            if rec.node_id == node_id:
                return rec
        raise not_found(node_id)


def build_app(emu: Emulator) -> Starlette:
    def api(fn: Handler) -> Handler:
        """A Google API route: logged, authenticated (if required), ApiError → error JSON."""

        async def wrapped(request: Request) -> Response:
            raw = await request.body()
            text = raw.decode(errors="replace")
            emu.requests.append(
                {
                    "method": request.method,
                    "path": request.url.path,
                    "query": dict(request.query_params),
                    "body": json.loads(raw) if _is_json(raw) else (text or None),
                }
            )
            bearer = request.headers.get("authorization", "").startswith("Bearer ")
            if emu.config.require_auth and not bearer:
                return _error(
                    ApiError(
                        "UNAUTHENTICATED",
                        "Request is missing required authentication credential. Expected "
                        "OAuth 2 access token, login cookie or other valid authentication "
                        "credential.",
                    )
                )
            return await admin(fn)(request)

        return wrapped

    def admin(fn: Handler) -> Handler:
        """An /emulator/ route: not logged, no authentication."""

        async def wrapped(request: Request) -> Response:
            try:
                return await fn(request)
            except ApiError as e:
                return _error(e)

        return wrapped

    async def body(request: Request) -> Any:
        return schema.parse_json(await request.body())

    # --- nodes ---------------------------------------------------------------------------

    @api
    async def nodes(request: Request) -> Response:
        project, zone = emu.location(request)
        if request.method == "POST":
            node_id = request.query_params.get("nodeId")
            return JSONResponse(emu.nodes.create(project, zone, node_id, await body(request)))
        items = emu.nodes.in_zone(project, zone)
        return JSONResponse({"nodes": items} if items else {})

    @api
    async def node(request: Request) -> Response:
        project, zone = emu.location(request)
        node_id, _, verb = request.path_params["node"].partition(":")
        name = f"projects/{project}/locations/{zone}/nodes/{node_id}"
        if verb == "getGuestAttributes" and request.method == "POST":
            schema.check(await body(request), "GetGuestAttributesRequest", "request")
            return JSONResponse(_guest_attributes(emu.nodes.get(name)))
        if verb:
            raise ApiError("NOT_FOUND", f"Method {verb} not found for {name}.")
        if request.method == "GET":
            return JSONResponse(emu.nodes.get(name).render())
        if request.method == "DELETE":
            return JSONResponse(emu.nodes.delete(name))
        mask = request.query_params.get("updateMask")
        return JSONResponse(emu.nodes.patch(name, mask, await body(request)))

    # --- operations, queued resources ----------------------------------------------------

    @api
    async def operations(request: Request) -> Response:
        project, zone = emu.location(request)
        items = emu.ops.in_zone(project, zone)
        return JSONResponse({"operations": items} if items else {})

    @api
    async def operation(request: Request) -> Response:
        project, zone = emu.location(request)
        op = request.path_params["op"]
        return JSONResponse(emu.ops.get(f"projects/{project}/locations/{zone}/operations/{op}"))

    @api
    async def queued_resources(request: Request) -> Response:
        project, zone = emu.location(request)
        if request.method == "POST":
            qr_id = request.query_params.get("queuedResourceId")
            return JSONResponse(emu.queued.create(project, zone, qr_id, await body(request)))
        items = emu.queued.in_zone(project, zone)
        return JSONResponse({"queuedResources": items} if items else {})

    @api
    async def queued_resource(request: Request) -> Response:
        project, zone = emu.location(request)
        name = f"projects/{project}/locations/{zone}/queuedResources/{request.path_params['qr']}"
        if request.method == "DELETE":
            force = request.query_params.get("force", "false").lower() == "true"
            return JSONResponse(emu.queued.delete(name, force))
        return JSONResponse(emu.queued.render(emu.queued.get(name)))

    # --- /emulator/ (test-only) ----------------------------------------------------------

    @admin
    async def preempt(request: Request) -> Response:
        node_id, _, verb = request.path_params["node"].partition(":")
        if verb != "preempt":
            raise ApiError("NOT_FOUND", f"No admin verb {verb!r}.")
        p, z = request.path_params["project"], request.path_params["zone"]
        payload = await body(request)
        grace_s = float(payload.get("grace_s", request.query_params.get("grace_s", 10.0)))
        rec = await emu.nodes.preempt(f"projects/{p}/locations/{z}/nodes/{node_id}", grace_s)
        return JSONResponse({"node": rec.render(), "shutdownExit": rec.shutdown_exit})

    async def requests(request: Request) -> Response:
        if request.method == "DELETE":
            emu.requests.clear()
        return JSONResponse(emu.requests)

    @admin
    async def node_info(request: Request) -> Response:
        rec = emu.node_by_id(request.path_params["node"])
        workers = [
            {
                "ip": w.ip,
                "netns": w.netns,
                "startupExit": rec.startup_exit[i] if i < len(rec.startup_exit) else None,
                "startupLog": str(emu.nodes.log_path(rec, "startup", i)),
                "shutdownLog": str(emu.nodes.log_path(rec, "shutdown", i)),
            }
            for i, w in enumerate(rec.workers)
        ]
        return JSONResponse({"node": rec.render(), "workers": workers})

    @admin
    async def startup_log(request: Request) -> Response:
        rec = emu.node_by_id(request.path_params["node"])
        worker = int(request.query_params.get("worker", "0"))
        if not 0 <= worker < len(rec.workers):
            raise invalid(f"No worker {worker} on node {rec.node_id}.", "worker")
        path = emu.nodes.log_path(rec, "startup", worker)
        return PlainTextResponse(path.read_text() if path.exists() else "")

    return Starlette(
        routes=[
            Route(f"{LOC}/nodes", nodes, methods=["GET", "POST"]),
            Route(f"{LOC}/nodes/{{node}}", node, methods=["GET", "DELETE", "PATCH", "POST"]),
            Route(f"{LOC}/operations", operations, methods=["GET"]),
            Route(f"{LOC}/operations/{{op}}", operation, methods=["GET"]),
            Route(f"{LOC}/queuedResources", queued_resources, methods=["GET", "POST"]),
            Route(f"{LOC}/queuedResources/{{qr}}", queued_resource, methods=["GET", "DELETE"]),
            Route("/emulator/nodes/{project}/{zone}/{node}", preempt, methods=["POST"]),
            Route("/emulator/requests", requests, methods=["GET", "DELETE"]),
            Route("/emulator/nodes/{node}", node_info, methods=["GET"]),
            Route("/emulator/nodes/{node}/startup-log", startup_log, methods=["GET"]),
        ]
    )


def _error(e: ApiError) -> Response:
    return JSONResponse(e.body(), status_code=e.http_status)


def _is_json(raw: bytes) -> bool:
    try:
        json.loads(raw)
    except ValueError:
        return False
    return bool(raw.strip())


def _guest_attributes(rec: NodeRecord) -> dict[str, Any]:
    """One (empty) entry per worker: the workers publish no guest attributes here."""
    return {
        "guestAttributes": [{"queryPath": "", "queryValue": {"items": []}} for _ in rec.workers]
    }
