"""Queued resources: WAITING_FOR_RESOURCES → PROVISIONING → ACTIVE.

The create operation ends at once with the queued resource WAITING_FOR_RESOURCES. Google's
guide (cloud.google.com/tpu/docs/queued-resources) says that state "replaced the ACCEPTED
state"; ``EmulatorConfig.queued_accepted`` brings back the older sequence the discovery
document still lists: ACCEPTED → (WAITING_FOR_RESOURCES while the pool lacks hosts) →
PROVISIONING. A background task waits for enough free hosts for all of ``tpu.nodeSpec``,
creates the nodes, and turns ACTIVE when they are READY. A node of an ACTIVE queued resource
that is preempted or deleted makes it SUSPENDED. Deleting one that still has nodes needs
``force=true``.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

from tests.tpuemu import schema
from tests.tpuemu.errors import ApiError, invalid, not_found
from tests.tpuemu.nodes import NodeRecord, Nodes
from tests.tpuemu.ops import Operations, now

QR_ID = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass
class QueuedRecord:
    project: str
    zone: str
    qr_id: str
    body: dict[str, Any]
    nodes: list[NodeRecord]  # prepared at create, stored once provisioned
    state: str = "ACCEPTED"
    error: ApiError | None = None
    create_time: str = field(default_factory=now)
    task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}/queuedResources/{self.qr_id}"


class QueuedResources:
    def __init__(self, nodes: Nodes, ops: Operations) -> None:
        self.nodes = nodes
        self.ops = ops
        self.records: dict[str, QueuedRecord] = {}

    def create(self, project: str, zone: str, qr_id: str | None, body: Any) -> dict[str, Any]:
        if not qr_id or QR_ID.fullmatch(qr_id) is None:
            raise invalid(
                f"Invalid value for field 'queuedResourceId': '{qr_id or ''}'.",
                "queuedResourceId",
            )
        qr = schema.check(body, "QueuedResource", "queued_resource")
        specs = qr.get("tpu", {}).get("nodeSpec", [])
        if not specs:
            raise invalid("tpu.node_spec must be set.", "queuedResource.tpu.nodeSpec")
        name = f"projects/{project}/locations/{zone}/queuedResources/{qr_id}"
        if name in self.records:
            raise ApiError("ALREADY_EXISTS", f"Resource '{name}' already exists")
        parent = f"projects/{project}/locations/{zone}"
        prepared: list[NodeRecord] = []
        for spec in specs:
            if spec.get("parent") != parent:
                raise invalid(
                    f"Invalid value for field 'parent': '{spec.get('parent')}'; "
                    f"must be '{parent}'.",
                    "queuedResource.tpu.nodeSpec.parent",
                )
            rec = self.nodes.prepare(project, zone, spec.get("nodeId"), spec.get("node", {}))
            rec.queued_resource = name
            prepared.append(rec)
        rec_qr = QueuedRecord(project, zone, qr_id, qr, prepared)
        if not self.nodes.config.queued_accepted:
            rec_qr.state = "WAITING_FOR_RESOURCES"
        self.records[name] = rec_qr
        rec_qr.task = asyncio.create_task(self._provision(rec_qr))
        op = self.ops.start(project, zone, name, "create")
        self.ops.succeed(op, self.render(rec_qr), "QueuedResource")
        return op

    def get(self, name: str) -> QueuedRecord:
        rec = self.records.get(name)
        if rec is None:
            raise not_found(name)
        return rec

    def in_zone(self, project: str, zone: str) -> list[dict[str, Any]]:
        return [
            self.render(r) for r in self.records.values() if (r.project, r.zone) == (project, zone)
        ]

    def delete(self, name: str, force: bool) -> dict[str, Any]:
        rec = self.get(name)
        live = [n for n in rec.nodes if self.nodes.records.get(n.name) is n]
        if live and not force:
            raise ApiError(
                "FAILED_PRECONDITION",
                f"Cannot delete QueuedResource '{name}' in state {self.state(rec)} while it "
                "has TPU nodes; delete the nodes first or set force=true.",
            )
        rec.state = "DELETING"
        op = self.ops.start(rec.project, rec.zone, name, "delete")
        rec.task = asyncio.create_task(self._delete(rec, live, op))
        return op

    def state(self, rec: QueuedRecord) -> str:
        if rec.state == "ACTIVE" and any(
            self.nodes.records.get(n.name) is not n or n.state == "PREEMPTED" for n in rec.nodes
        ):
            rec.state = "SUSPENDED"
        return rec.state

    def render(self, rec: QueuedRecord) -> dict[str, Any]:
        state = self.state(rec)
        data_key = {
            "WAITING_FOR_RESOURCES": "waitingForResourcesData",
        }.get(state, re.sub(r"_([a-z])", lambda m: m.group(1).upper(), state.lower()) + "Data")
        detail: dict[str, Any] = {"state": state}
        if state == "FAILED" and rec.error is not None:
            detail["failedData"] = {"error": rec.error.rpc_status()}
        elif data_key in schema.schemas()["QueuedResourceState"]["properties"]:
            detail[data_key] = {}
        return {**rec.body, "name": rec.name, "createTime": rec.create_time, "state": detail}

    async def _provision(self, rec: QueuedRecord) -> None:
        cfg = self.nodes.config
        need = sum(n.workers_wanted for n in rec.nodes)
        await asyncio.sleep(cfg.queue_poll_s)
        while self.nodes.pool.free() < need:
            if rec.state == "DELETING":
                return
            rec.state = "WAITING_FOR_RESOURCES"
            await asyncio.sleep(cfg.queue_poll_s)
        if rec.state == "DELETING":
            return
        taken = [n for n in rec.nodes if n.name in self.nodes.records]
        if taken:
            rec.state = "FAILED"
            rec.error = ApiError("ALREADY_EXISTS", f"Node '{taken[0].name}' already exists.")
            return
        rec.state = "PROVISIONING"
        for node in rec.nodes:
            self.nodes.records[node.name] = node
            self.nodes.take_hosts(node)
        await asyncio.sleep(cfg.create_delay_s)
        if rec.state != "PROVISIONING":
            return
        for node in rec.nodes:
            self.nodes.become_ready(node)
        rec.state = "ACTIVE"

    async def _delete(self, rec: QueuedRecord, live: list[NodeRecord], op: dict[str, Any]) -> None:
        await asyncio.sleep(self.nodes.config.delete_delay_s)
        for node in live:
            await self.nodes.remove(node)
        self.records.pop(rec.name, None)
        self.ops.succeed(op, {}, "Empty")
