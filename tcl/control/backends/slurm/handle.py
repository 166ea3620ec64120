"""A SLURM run's handle: the login node (as reached at placement), the job, its run dir."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tcl.control.backends.base import Handle, HostTask, NodePlace
from tcl.control.config import SlurmHost


class SlurmLogin(BaseModel):
    """How the login node was reached when the run was placed (it outlives the config)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    ssh: str
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    proxy_jump: str | None = None
    ssh_config_file: str | None = None
    python: str = "python3"

    @classmethod
    def of(cls, cfg: SlurmHost) -> SlurmLogin:
        return cls(
            ssh=cfg.ssh,
            port=cfg.port,
            user=cfg.user,
            identity_file=cfg.identity_file,
            known_hosts=cfg.known_hosts,
            proxy_jump=cfg.proxy_jump,
            ssh_config_file=cfg.ssh_config_file,
            python=cfg.python,
        )

    def host_config(self) -> SlurmHost:
        return SlurmHost(
            type="slurm",
            ssh=self.ssh,
            port=self.port,
            user=self.user,
            identity_file=self.identity_file,
            known_hosts=self.known_hosts,
            proxy_jump=self.proxy_jump,
            ssh_config_file=self.ssh_config_file,
            python=self.python,
        )


class SlurmHandle(Handle):
    kind: Literal["slurm"] = "slurm"
    host: str  # the config host (the login node's name there)
    login: SlurmLogin
    job_id: str
    run_dir: str  # on the shared filesystem: spec, script, slurm-%j.out, a<restart>/n<node>/
    nodes: int = Field(default=1, ge=1)
    restart: int = Field(default=0, ge=0)  # SLURM's restart count this attempt belongs to

    @property
    def node_count(self) -> int:
        return self.nodes

    def task_label(self) -> str:
        return f"job {self.job_id}"

    def places(self) -> list[NodePlace]:
        return [NodePlace(self.host, f"job {self.job_id} node {i}", []) for i in range(self.nodes)]

    def names(self, task: HostTask) -> bool:
        return task.host == self.host and task.task_id == self.job_id

    def state_dir(self, node: int) -> str:
        return f"{self.run_dir}/a{self.restart}/n{node}"
