"""What every entry of a matrix runs, and where: kept with the matrix as versioned JSON."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from tcl.control.lifecycle.retry_policy import RetryPolicy
from tcl.runner.api import JobRef

SPEC_VERSION = 1


class MatrixSpec(BaseModel):
    """``argv``: a command template whose ``{field}``s are filled with each entry's (quoted)
    values; or ``job``: a ``tcl.jobs`` job whose config each entry's fields override."""

    model_config = ConfigDict(extra="forbid")

    version: int = SPEC_VERSION
    argv: list[str] = Field(default_factory=list)
    job: JobRef | None = None
    chip: str | None = None
    chips: int = Field(default=1, ge=0)
    nodes: int = Field(default=0, ge=0)
    host: str | None = None
    clusters: list[str] = Field(default_factory=list)  # only hosts of these (``--cluster``)
    avoid_clusters: list[str] = Field(default_factory=list)  # no host of these
    image: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    submitter_base: dict[str, str] = Field(default_factory=dict)  # `matrix add`'s shell's PATH...
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    code_sha256: str  # the snapshot taken at `tcl matrix add` (kept in the local code cache)
    job_cwd: str = ""
    max_duration_s: float | None = None
    config_path: str  # the config file `tcl matrix add` read (absolute; a scheduler reads it)
    config_named: bool = False  # the user named it (then it must exist)
