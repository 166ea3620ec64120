"""A TPU run's handle: the node it ran on, and one shim task per worker."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from tcl.control.backends.shimhandle import ShimHandle, ShimNode


class TpuHandle(ShimHandle):
    kind: Literal["tpu"]  # type: ignore[assignment]
    host: str  # the config host (the slice)
    node_id: str
    created: bool = False  # this run created the node
    down: bool = False  # delete the node when the run ends (`tcl submit --down`)
    nodes: list[ShimNode] = Field(default_factory=list)  # empty while the node boots

    @property
    def node_count(self) -> int:
        return max(1, len(self.nodes))

    @property
    def node_noun(self) -> str:
        return "worker"

    def task_label(self) -> str:
        return self.node_id
