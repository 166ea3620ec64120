"""Volcano queues: resource quantities, what a pod asks, what a queue's pods hold."""

from __future__ import annotations

import re
from typing import Any

from tests.k8semu.cluster import TERMINAL, Cluster, PodRecord
from tests.k8semu.config import QueueSpec

_SCALE = {
    "": 1.0,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
}


def quantity(value: Any) -> float:
    """A resource quantity (``8``, ``"500m"``, ``"4Gi"``) as a number (0 if unreadable)."""
    m = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(value))
    if not m:
        return 0.0
    return float(m.group(1)) * _SCALE.get(m.group(2), 1.0)


def pod_demand(pod: dict[str, Any], keys: list[str]) -> dict[str, float]:
    """What a pod asks of the queue's resource keys: requests, else limits, summed."""
    out = dict.fromkeys(keys, 0.0)
    for c in pod["spec"]["containers"]:
        res = c.get("resources") or {}
        for k in keys:
            v = (res.get("requests") or {}).get(k, (res.get("limits") or {}).get(k))
            if v is not None:
                out[k] += quantity(v)
    return out


class Queues:
    def __init__(self, cluster: Cluster) -> None:
        self.c = cluster

    def get(self, name: str) -> QueueSpec | None:
        return next((q for q in self.c.config.queues if q.name == name), None)

    def allocated(self, q: QueueSpec) -> dict[str, float]:
        """What the queue's scheduled, unfinished pods hold (a deleted job's until they end)."""
        keys = list(q.capability)
        total = dict.fromkeys(keys, 0.0)
        for rec in self.c.pods.values():
            if rec.queue == q.name and rec.scheduled and rec.phase not in TERMINAL:
                for k, v in pod_demand(rec.obj, keys).items():
                    total[k] += v
        return total

    def shortage(self, q: QueueSpec, pods: list[PodRecord]) -> str | None:
        """Why ``pods`` do not all fit in the queue now, or None if they do."""
        keys = list(q.capability)
        held = self.allocated(q)
        need = dict.fromkeys(keys, 0.0)
        for rec in pods:
            for k, v in pod_demand(rec.obj, keys).items():
                need[k] += v
        cap = {k: quantity(v) for k, v in q.capability.items()}
        short = [k for k in keys if held[k] + need[k] > cap[k]]
        if not short:
            return None
        return "queue resource quota insufficient: " + ", ".join(
            f"{k} requested {need[k]:g}, {cap[k] - held[k]:g} free of {cap[k]:g}" for k in short
        )

    def counts(self, q: QueueSpec) -> dict[str, int]:
        """``running``/``pending``/``completed``/``inqueue`` jobs, as in a Queue's status."""
        out = {"running": 0, "pending": 0, "completed": 0, "inqueue": 0}
        for job in self.c.jobs.values():
            if job.obj["spec"].get("queue", "default") != q.name:
                continue
            phase = job.obj["status"]["state"]["phase"]
            if phase == "Running":
                out["running"] += 1
            elif phase in ("Completed", "Failed", "Aborted", "Terminated"):
                out["completed"] += 1
            else:
                out["pending"] += 1
        return out
