"""The stored run request: what the store keeps of a submit, typed and versioned.

A :class:`RunRequest` is enough to place the run again as it was submitted (a lost node, a
retry, a matrix entry's first placement); secrets are kept by name only. The store writes it
as JSON in ``tcl_runs.request`` (``model_dump(mode="json")``, ``version`` included) and parses
it once per row. Reading accepts every request stored so far: a key an older tcl did not write
takes its default, and a key this version does not know (one dropped, or written by a newer
tcl) is ignored (``extra="ignore"``, not ``"forbid"``: a run must never stop loading because
of what another version stored). A change to a field's meaning bumps ``version``.
"""

from __future__ import annotations

import shlex

from pydantic import BaseModel, ConfigDict, Field

from tcl.control.lifecycle.retry_policy import RetryPolicy
from tcl.runner.api import JobRef, SessionKind

__all__ = ["REQUEST_VERSION", "RunRequest"]

REQUEST_VERSION = 1  # requests stored before the field existed read as this version


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    version: int = REQUEST_VERSION
    argv: list[str] = Field(default_factory=list)  # empty for a tcl.jobs job or a session
    chip: str | None = None
    chips: int = 0
    nodes: int = 0  # 0: as many as the chips need
    host: str | None = None  # the ``--host`` pin
    clusters: list[str] = Field(default_factory=list)  # ``--cluster``: only hosts of these
    avoid_clusters: list[str] = Field(default_factory=list)  # ``--avoid-cluster``
    image: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    # the submitting shell's base variables (tcl.agentenv.submitter_env): the base of a job
    # placed on this machine, its retries included
    submitter_base: dict[str, str] = Field(default_factory=dict)
    secret_names: list[str] = Field(default_factory=list)  # read again from the environment
    uv_groups: list[str] = Field(default_factory=list)  # the project environment's groups
    project_env: bool = True  # False: the host's environment (``--host-env``)
    job: str | None = None  # the tcl.jobs key (``tcl ps --json``'s ``job``); older rows: only it
    job_ref: JobRef | None = None  # the job with its config, to place it again
    options: dict[str, str] = Field(default_factory=dict)  # backend options (tpu.version, down)
    job_cwd: str = ""  # where the job starts in the shipped tree
    max_duration_s: float | None = None
    retry: RetryPolicy | None = None
    session: SessionKind | None = None  # an interactive session (`tcl repl`, `@tcl.remote`)
    config_path: str | None = None  # the config it was placed with (its controller's too)
    config_named: bool = False

    def command_text(self) -> str:
        """What the run runs, as one line (``tcl ps``, the dashboard, its search): its argv
        (shell-quoted), else its job's key, else its session kind; the runner's order."""
        if self.argv:
            return shlex.join(self.argv)
        if self.job:
            return f"job {self.job}"
        if self.session is not None:
            return f"({self.session.value} session)"
        return ""
