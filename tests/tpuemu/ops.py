"""Long-running operations (``google.longrunning.Operation`` as the v2 REST API renders it)."""

from __future__ import annotations

import secrets
import time
from typing import Any

from tests.tpuemu.errors import ApiError, not_found

TYPE_PREFIX = "type.googleapis.com/google.cloud.tpu.v2."
EMPTY = {"@type": "type.googleapis.com/google.protobuf.Empty"}


def now() -> str:
    """An RFC 3339 timestamp as Google renders them (UTC, ``Z``, nanosecond field)."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e9):09d}Z"


class Operations:
    def __init__(self) -> None:
        self._ops: dict[str, dict[str, Any]] = {}

    def start(self, project: str, zone: str, target: str, verb: str) -> dict[str, Any]:
        """A new, not yet done operation on ``target`` (a resource name)."""
        op_id = f"operation-{int(time.time() * 1000)}-{secrets.token_hex(6)}-{secrets.token_hex(4)}"
        name = f"projects/{project}/locations/{zone}/operations/{op_id}"
        op: dict[str, Any] = {
            "name": name,
            "metadata": {
                "@type": TYPE_PREFIX + "OperationMetadata",
                "createTime": now(),
                "target": target,
                "verb": verb,
                "cancelRequested": False,
                "apiVersion": "v2",
            },
            "done": False,
        }
        self._ops[name] = op
        return op

    def succeed(self, op: dict[str, Any], response: dict[str, Any], type_name: str) -> None:
        """Done with ``response``; ``type_name``: ``Node``, ``QueuedResource`` or ``Empty``."""
        op["metadata"]["endTime"] = now()
        op["done"] = True
        op["response"] = EMPTY if type_name == "Empty" else {"@type": TYPE_PREFIX + type_name}
        if type_name != "Empty":
            op["response"] = {**op["response"], **response}

    def fail(self, op: dict[str, Any], error: ApiError) -> None:
        op["metadata"]["endTime"] = now()
        op["done"] = True
        op["error"] = error.rpc_status()

    def get(self, name: str) -> dict[str, Any]:
        op = self._ops.get(name)
        if op is None:
            raise not_found(name)
        return op

    def in_zone(self, project: str, zone: str) -> list[dict[str, Any]]:
        prefix = f"projects/{project}/locations/{zone}/operations/"
        return [op for name, op in self._ops.items() if name.startswith(prefix)]
