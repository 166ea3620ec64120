"""Wire types both agents read: the shim in a task's spec, a SLURM node's runner in its batch
spec file. ``tcl.shim.api`` re-exports them, so the shim's schema is unchanged."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StringConstraints

MAX_PATH_LEN = 4096
MAX_SECRET_LEN = 16 * 1024  # a password or token

AbsPath = Annotated[str, StringConstraints(max_length=MAX_PATH_LEN, pattern=r"^/")]


class ClusterFs(BaseModel):
    """A cluster's shared filesystem (JuiceFS), mounted at ``mount_point`` before the task
    starts and shared by the host's tasks. ``meta_url`` carries no password: the password
    travels here, reaches ``juicefs`` through its environment (``META_PASSWORD``) and is never
    written to the task's record."""

    model_config = ConfigDict(extra="forbid")

    meta_url: str = Field(min_length=1, max_length=MAX_PATH_LEN, pattern=r"^[a-z][a-z0-9+]*://")
    meta_password: str | None = Field(default=None, repr=False, max_length=MAX_SECRET_LEN)
    mount_point: AbsPath
    cache_size_mib: StrictInt | None = Field(default=None, gt=0)
    cache_dir: AbsPath | None = None
    all_squash: str | None = Field(default=None, pattern=r"^[0-9]+:[0-9]+$")
    # None: never unmounted by the shim; else this long after its last task ended
    unmount_after_idle_s: StrictFloat | None = Field(default=300.0, ge=0, allow_inf_nan=False)


class ForkRequest(BaseModel):
    """A runner for a task, asked of the runner's fork server (``tcl-runner forkserver``, started
    by the shim's process executor): one JSON line on the server's stdin; the answer is the
    forked wrapper's pid on a line of its stdout. The environment holds the job's secrets, so
    this travels through a pipe only, never a file or a command line."""

    model_config = ConfigDict(extra="forbid")

    argv: list[str] = Field(description="the runner's arguments, as for a cold start (serve …)")
    env: dict[str, str] = Field(description="added to the runner's environment (secrets too)")
    task_dir: str = Field(description="the working dir of the wrapper and the runner")
    log_file: str = Field(description="their stdout and stderr")
    exit_file: str = Field(description="where the wrapper records the runner's exit code")
    cgroup: str | None = Field(default=None, description="the task's cgroup, joined first")
