"""TPU nodes: create, get, list, patch, delete, preempt, and what each does to the workers.

CREATING → READY after ``create_delay_s``, when the node takes its hosts from the pool (too few
free: the create operation fails with RESOURCE_EXHAUSTED and the node goes away, as a stockout
does). READY does not wait for the startup script, which runs in the background as on a first
boot. Delete and preemption kill every process the node's workers ran.
"""

from __future__ import annotations

import asyncio
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.tpuemu import accel, schema
from tests.tpuemu.config import EmulatorConfig
from tests.tpuemu.errors import ApiError, invalid, not_found
from tests.tpuemu.ops import Operations, now
from tests.tpuemu.workers import WorkerHost, WorkerPool, kill_host, run_script

NODE_ID = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
PATCHABLE = {"description", "labels", "metadata", "tags", "schedulingConfig", "networkConfig"}
PATCHABLE |= {"serviceAccount", "shieldedInstanceConfig", "acceleratorConfig"}
ENDPOINT_PORT = 8470


@dataclass
class NodeRecord:
    project: str
    zone: str
    node_id: str
    body: dict[str, Any]  # the fields the client set (output-only ones dropped)
    workers_wanted: int
    state: str = "CREATING"
    workers: list[WorkerHost] = field(default_factory=list)
    uid: str = field(default_factory=lambda: str(secrets.randbits(62)))
    create_time: str = field(default_factory=now)
    queued_resource: str | None = None
    startup_exit: list[int | None] = field(default_factory=list)
    shutdown_exit: list[int | None] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    create_op: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return f"projects/{self.project}/locations/{self.zone}/nodes/{self.node_id}"

    def render(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.body, "name": self.name, "state": self.state}
        out.update(createTime=self.create_time, id=self.uid, apiVersion="V2")
        if self.state == "READY":
            out["health"] = "HEALTHY"
        if self.workers:
            out["networkEndpoints"] = [
                {
                    "ipAddress": w.ip,
                    "port": ENDPOINT_PORT,
                    "accessConfig": {"externalIp": w.external_ip or w.ip},
                }
                for w in self.workers
            ]
        if self.queued_resource is not None:
            out["queuedResource"] = self.queued_resource
        return out


class Nodes:
    def __init__(self, config: EmulatorConfig, ops: Operations) -> None:
        self.config = config
        self.ops = ops
        self.pool = WorkerPool(config.workers)
        self.records: dict[str, NodeRecord] = {}

    # --- the API -------------------------------------------------------------------------

    def prepare(self, project: str, zone: str, node_id: str | None, body: Any) -> NodeRecord:
        """A checked, not yet stored node (shared by nodes.create and queued resources)."""
        if not node_id or NODE_ID.fullmatch(node_id) is None:
            raise invalid(
                f"Invalid value for field 'nodeId': '{node_id or ''}'. Must match "
                "regex '^[a-z]([-a-z0-9]*[a-z0-9])?$' and be at most 63 characters.",
                "nodeId",
            )
        node = schema.check(body, "Node", "node")
        if "acceleratorType" in node:
            workers = accel.workers_for_type(str(node["acceleratorType"]), zone)
        elif "acceleratorConfig" in node:
            node["acceleratorType"], workers = accel.workers_for_config(
                node["acceleratorConfig"], zone
            )
        else:
            raise invalid("Either acceleratorType or acceleratorConfig must be set.", "node")
        if not node.get("runtimeVersion"):
            raise invalid("Field 'runtimeVersion' is required.", "node.runtimeVersion")
        rec = NodeRecord(project, zone, node_id, node, workers)
        if rec.name in self.records:
            raise ApiError("ALREADY_EXISTS", f"Resource '{rec.name}' already exists")
        return rec

    def create(self, project: str, zone: str, node_id: str | None, body: Any) -> dict[str, Any]:
        rec = self.prepare(project, zone, node_id, body)
        self.records[rec.name] = rec
        op = self.ops.start(project, zone, rec.name, "create")
        rec.create_op = op
        rec.tasks.append(asyncio.create_task(self._boot(rec, op)))
        return op

    def get(self, name: str) -> NodeRecord:
        rec = self.records.get(name)
        if rec is None:
            raise not_found(name)
        return rec

    def in_zone(self, project: str, zone: str) -> list[dict[str, Any]]:
        return [r.render() for r in self.records.values() if (r.project, r.zone) == (project, zone)]

    def patch(self, name: str, mask: str | None, body: Any) -> dict[str, Any]:
        rec = self.get(name)
        node = schema.check(body, "Node", "node")
        paths = [p.strip() for p in (mask or "").split(",") if p.strip()]
        if not paths:
            raise invalid("The update_mask must be set.", "updateMask")
        for path in paths:
            key = re.sub(r"_([a-z])", lambda m: m.group(1).upper(), path.split(".")[0])
            if key not in PATCHABLE:
                raise invalid(f"Invalid field mask path: '{path}'.", "updateMask")
            if key in node:
                rec.body[key] = node[key]
            else:
                rec.body.pop(key, None)
        op = self.ops.start(rec.project, rec.zone, name, "update")
        self.ops.succeed(op, rec.render(), "Node")
        return op

    def delete(self, name: str) -> dict[str, Any]:
        rec = self.get(name)
        if rec.create_op is not None and not rec.create_op["done"]:
            self.ops.fail(rec.create_op, ApiError("ABORTED", f"Node '{name}' was deleted."))
        rec.state = "DELETING"
        op = self.ops.start(rec.project, rec.zone, name, "delete")
        rec.tasks.append(asyncio.create_task(self._delete(rec, op)))
        return op

    async def preempt(self, name: str, grace_s: float) -> NodeRecord:
        """What GCE does to a preempted VM: shutdown-script (≤ ``grace_s``), then power off."""
        rec = self.get(name)
        if rec.state != "READY":
            raise ApiError("FAILED_PRECONDITION", f"Node '{name}' is {rec.state}, not READY.")
        script = rec.body.get("metadata", {}).get("shutdown-script")
        if script and self.config.ssh is not None:
            ssh = self.config.ssh
            rec.shutdown_exit = list(
                await asyncio.gather(
                    *(
                        run_script(ssh, w, script, self.log_path(rec, "shutdown", i), grace_s)
                        for i, w in enumerate(rec.workers)
                    )
                )
            )
        await self.power_off(rec)
        rec.state = "PREEMPTED"
        return rec

    # --- lifecycle -----------------------------------------------------------------------

    def log_path(self, rec: NodeRecord, kind: str, worker: int) -> Path:
        return self.config.log_dir / rec.zone / rec.node_id / f"{kind}-{worker}.log"

    def take_hosts(self, rec: NodeRecord) -> bool:
        hosts = self.pool.take(rec.name, rec.workers_wanted)
        if hosts is None:
            return False
        rec.workers = hosts
        return True

    def become_ready(self, rec: NodeRecord) -> None:
        """READY, and the first boot's startup script starts on every worker."""
        rec.state = "READY"
        script = rec.body.get("metadata", {}).get("startup-script")
        rec.startup_exit = [None] * len(rec.workers)
        if script and self.config.ssh is not None:
            for i in range(len(rec.workers)):
                rec.tasks.append(asyncio.create_task(self._startup(rec, i, script)))

    async def power_off(self, rec: NodeRecord) -> None:
        """Kill everything the node's workers run (the hosts stay taken)."""
        await asyncio.gather(*(asyncio.to_thread(kill_host, w) for w in rec.workers))
        current = asyncio.current_task()
        for task in rec.tasks:
            if task is not current:
                task.cancel()

    async def remove(self, rec: NodeRecord) -> None:
        """The node is gone: its processes killed, its hosts back in the pool."""
        await self.power_off(rec)
        self.pool.release(rec.name)
        if self.records.get(rec.name) is rec:
            del self.records[rec.name]

    async def _boot(self, rec: NodeRecord, op: dict[str, Any]) -> None:
        await asyncio.sleep(self.config.create_delay_s)
        if rec.state != "CREATING":
            return
        if not self.take_hosts(rec):
            del self.records[rec.name]
            self.ops.fail(op, stockout(rec.zone))
            return
        self.become_ready(rec)
        self.ops.succeed(op, rec.render(), "Node")

    async def _startup(self, rec: NodeRecord, worker: int, script: str) -> None:
        assert self.config.ssh is not None
        log = self.log_path(rec, "startup", worker)
        rc = await run_script(self.config.ssh, rec.workers[worker], script, log)
        rec.startup_exit[worker] = rc

    async def _delete(self, rec: NodeRecord, op: dict[str, Any]) -> None:
        await asyncio.sleep(self.config.delete_delay_s)
        await self.remove(rec)
        self.ops.succeed(op, {}, "Empty")


def stockout(zone: str) -> ApiError:
    return ApiError(
        "RESOURCE_EXHAUSTED",
        f'There is no more capacity in the zone "{zone}"; you can try in another zone where '
        "Cloud TPU Nodes are offered (see https://cloud.google.com/tpu/docs/regions) "
        f"[EID: 0x{secrets.token_hex(8)}]",
    )
