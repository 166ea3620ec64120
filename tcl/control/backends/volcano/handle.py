"""A Volcano run's handle: where its Job is (cluster, namespace), what it is called, and which
of Volcano's restarts of that Job this attempt is."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tcl.control.backends.base import Handle, HostTask, NodePlace


class KubeTarget(BaseModel):
    """How the cluster was reached when the run was placed (it outlives the config)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str


class VolcanoHandle(Handle):
    kind: Literal["volcano"] = "volcano"
    host: str  # the config host
    kube: KubeTarget
    job: str  # the vcjob's name
    secret: str  # the Secret holding the runners' spec (and their token)
    nodes: int = Field(default=1, ge=1)
    runner_port: int
    retry: int = Field(default=0, ge=0)  # Volcano's retryCount this attempt belongs to

    @property
    def node_count(self) -> int:
        return self.nodes

    @property
    def node_noun(self) -> str:
        return "pod"

    def task_label(self) -> str:
        return f"vcjob {self.kube.namespace}/{self.job}"

    def places(self) -> list[NodePlace]:
        return [NodePlace(self.host, f"pod {self.pod(i)}", []) for i in range(self.nodes)]

    def names(self, task: HostTask) -> bool:
        return task.host == self.host and task.task_id == self.job

    def pod(self, node: int) -> str:
        """Volcano names a task's pods ``<job>-<task>-<index>``; tcl's one task is ``worker``."""
        return f"{self.job}-worker-{node}"
