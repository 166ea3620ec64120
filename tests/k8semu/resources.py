"""The resource types served, and the object plumbing shared by the stores.

``Resource`` names a type (group, version, plural, kind); ``new_meta`` stamps the server-set
metadata; ``match_labels`` evaluates a ``labelSelector``.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``pods`` or ``jobs.batch.volcano.sh``, as error messages name the type."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


PODS = Resource("", "v1", "pods", "Pod")
SECRETS = Resource("", "v1", "secrets", "Secret")
PVCS = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
VCJOBS = Resource("batch.volcano.sh", "v1alpha1", "jobs", "Job")
QUEUES = Resource("scheduling.volcano.sh", "v1beta1", "queues", "Queue", namespaced=False)
ANY = Resource("", "v1", "", "", namespaced=False)  # discovery: authenticated, never forbidden
PODGROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")

_versions = itertools.count(1000)


def next_version() -> str:
    return str(next(_versions))


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_meta(meta: dict[str, Any], namespace: str | None) -> dict[str, Any]:
    """The client's metadata plus what the server sets on create."""
    out = dict(meta)
    if namespace is not None:
        out["namespace"] = namespace
    out["uid"] = str(uuid.uuid4())
    out["resourceVersion"] = next_version()
    out["creationTimestamp"] = now()
    out.setdefault("generation", 1)
    return out


def parse_selector(selector: str | None) -> list[tuple[str, str, str]]:
    """``k=v,k2==v2,k3!=v3,k4,!k5`` → ``[(key, op, value)]``; op in ``= != exists !exists``."""
    out: list[tuple[str, str, str]] = []
    for term in (selector or "").split(","):
        term = term.strip()
        if not term:
            continue
        if "!=" in term:
            k, v = term.split("!=", 1)
            out.append((k.strip(), "!=", v.strip()))
        elif "=" in term:
            k, v = term.split("=", 1)
            out.append((k.strip(), "=", v.lstrip("=").strip()))
        elif term.startswith("!"):
            out.append((term[1:].strip(), "!exists", ""))
        else:
            out.append((term, "exists", ""))
    return out


def match_labels(obj: dict[str, Any], selector: list[tuple[str, str, str]]) -> bool:
    labels: dict[str, str] = obj.get("metadata", {}).get("labels") or {}
    for key, op, value in selector:
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "!exists" and key in labels:
            return False
    return True


def list_body(res: Resource, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "kind": f"{res.kind}List",
        "apiVersion": res.api_version,
        "metadata": {"resourceVersion": next_version()},
        "items": items,
    }


def _canonical_quantity(value: Any) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{round(value * 1000)}m"
    if isinstance(value, float):
        return str(int(value))
    return str(value)


def normalize_pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """What the API server does to a pod spec on the way in: resource quantities as strings."""
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        res = c.get("resources") or {}
        for part in ("limits", "requests"):
            if isinstance(res.get(part), dict):
                res[part] = {k: _canonical_quantity(v) for k, v in res[part].items()}
    return spec


def status_success(res: Resource, name: str, uid: str) -> dict[str, Any]:
    """The body of a delete that left nothing behind."""
    details: dict[str, Any] = {"name": name, "kind": res.plural, "uid": uid}
    if res.group:
        details["group"] = res.group
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


# the field labels the API server accepts in a fieldSelector, per kind (others: 400)
FIELDS = {
    "Pod": {
        "metadata.name": ("metadata", "name"),
        "metadata.namespace": ("metadata", "namespace"),
        "spec.nodeName": ("spec", "nodeName"),
        "spec.restartPolicy": ("spec", "restartPolicy"),
        "spec.schedulerName": ("spec", "schedulerName"),
        "status.phase": ("status", "phase"),
        "status.podIP": ("status", "podIP"),
    },
    "Job": {
        "metadata.name": ("metadata", "name"),
        "metadata.namespace": ("metadata", "namespace"),
    },
}


def field_filter(res: Resource, selector: str | None) -> list[tuple[tuple[str, str], str, str]]:
    """``status.phase=Running,metadata.name!=x`` → ``[(path, op, value)]``; ValueError names
    an unsupported field label, as the server's 400 does."""
    out: list[tuple[tuple[str, str], str, str]] = []
    for term in (selector or "").split(","):
        if not term.strip():
            continue
        op = "!=" if "!=" in term else "="
        key, value = (s.strip() for s in term.replace("==", "=").split(op, 1))
        path = FIELDS.get(res.kind, {}).get(key)
        if path is None:
            raise ValueError(f"field label not supported: {key}")
        out.append((path, op, value))
    return out


def match_fields(obj: dict[str, Any], terms: list[tuple[tuple[str, str], str, str]]) -> bool:
    for (part, key), op, value in terms:
        actual = str((obj.get(part) or {}).get(key) or "")
        if (actual == value) != (op == "="):
            return False
    return True
