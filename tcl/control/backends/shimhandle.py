"""A shim-based run's handle: one task per node, each with how its host was reached."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tcl.control.backends.base import Handle as BaseHandle
from tcl.control.backends.base import HostTask, NodePlace
from tcl.control.placement import Placement


class ShimNode(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    host: str
    # How the host was reached at placement, so a run outlives the config line that placed it.
    placement: Placement | None = None
    task_id: str
    runner_port: int | None = None
    ssh_port: int | None = None
    accelerators: list[int] = Field(default_factory=list)  # the host's indices the task holds


class ShimHandle(BaseHandle):
    kind: Literal["local", "ssh"]
    nodes: list[ShimNode] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _from_v0(cls, data: Any) -> Any:
        """Attempts stored before the contract: ``{task_id, runner_port, ssh_port, placement,
        released}`` with the host and kind in the attempt's columns (added by the loader)."""
        if isinstance(data, dict) and "nodes" not in data and "task_id" in data:
            node = {k: data.get(k) for k in ("task_id", "runner_port", "ssh_port", "placement")}
            node["host"] = data.get("host", "")
            return {
                "kind": data.get("kind"),
                "released": bool(data.get("released")),
                "nodes": [node],
            }
        return data

    @property
    def node_count(self) -> int:
        return len(self.nodes)

    def task_label(self) -> str:
        return self.nodes[0].task_id

    def places(self) -> list[NodePlace]:
        return [NodePlace(n.host, n.task_id, list(n.accelerators)) for n in self.nodes]

    def names(self, task: HostTask) -> bool:
        return any(n.host == task.host and n.task_id == task.task_id for n in self.nodes)
