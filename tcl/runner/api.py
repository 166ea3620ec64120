"""The runner's wire schema (pydantic). The runner owns it; clients import it, never the app.

The OpenAPI spec is generated from these models and the route table in ``app.py``
(``tcl-runner openapi``).
"""

from __future__ import annotations

import enum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

API_VERSION = 1


class RunnerState(enum.StrEnum):
    """Runner lifecycle; the legal moves live in ``tcl.runner.states``."""

    WAITING_SPEC = "waiting_spec"
    WAITING_CODE = "waiting_code"
    READY = "ready"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TERMINATED = "terminated"

    @property
    def is_final(self) -> bool:
        return self in (RunnerState.SUCCEEDED, RunnerState.FAILED, RunnerState.TERMINATED)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CodeRef(_Strict):
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0)


class CachedCodeRequest(_Strict):
    """Install the code from the host's tree cache instead of an upload (404 if absent)."""

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class ClusterInfo(_Strict):
    """Where this process sits in a multi-node job (for ``jax.distributed.initialize``)."""

    node_rank: int = Field(default=0, ge=0)
    nodes: int = Field(default=1, ge=1)
    coordinator: str | None = None  # "host:port" of rank 0


class JobRef(_Strict):
    """A ``tcl.jobs`` job, run as ``python -m tcl.jobs.launch``."""

    key: str
    config_yaml: str = ""
    restore: str | None = None


class JobSpec(_Strict):
    run_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")
    attempt: int = Field(default=0, ge=0)
    name: str = ""
    project: str = ""
    group: str = ""
    argv: list[str] = Field(default_factory=list)  # no shell unless the user asked for one
    working_dir: str | None = None  # default: <state-dir>/work
    env: dict[str, str] = Field(default_factory=dict)
    # Injected into the job's environment only: never a file, argv or log line (masked as ***).
    secrets: dict[str, str] = Field(default_factory=dict, repr=False)
    code: CodeRef | None = None  # None: the job needs no code upload
    max_duration_s: float | None = Field(default=None, gt=0)
    cluster: ClusterInfo = Field(default_factory=ClusterInfo)
    job: JobRef | None = None


class EventKind(enum.StrEnum):
    LOG = "log"
    STATE = "state"


class LogStream(enum.StrEnum):
    STDOUT = "stdout"
    STDERR = "stderr"
    RUNNER = "runner"


class Event(BaseModel):
    seq: int  # strictly increasing from 1
    ts: float  # unix seconds
    kind: EventKind
    stream: LogStream | None = None
    data: str | None = None
    state: RunnerState | None = None
    exit_code: int | None = None


class EventsQuery(_Strict):
    """Query of ``GET /api/events``: events with ``seq > after``; ``wait`` long-polls."""

    after: int = Field(default=0, ge=0)
    wait: float = Field(default=0.0, ge=0, le=60)
    limit: int = Field(default=1000, ge=1, le=10_000)


class LogsQuery(_Strict):
    """Query of ``WS /api/logs``."""

    after: int = Field(default=0, ge=0)


class EventsPage(BaseModel):
    events: list[Event]
    next: int  # pass as ``after`` to continue
    state: RunnerState
    exit_code: int | None = None
    more: bool  # more events are already available past ``next``


class HealthInfo(BaseModel):
    """Open to anyone (no token): the shim's probe learns here that a job has ended."""

    service: Literal["tcl-runner"] = "tcl-runner"
    version: str
    api_version: int = API_VERSION
    state: RunnerState
    exit_code: int | None = None


class StateInfo(BaseModel):
    """The answer of submit, code, run and stop: where the runner is now."""

    state: RunnerState
    exit_code: int | None = None


class StopRequest(_Strict):
    grace_s: float = Field(default=10.0, ge=0)


class Metrics(BaseModel):
    """The job's process tree (all zero before it starts) and the accelerators the runner sees."""

    cpu_percent: float
    memory_bytes: int
    processes: int = 0
    accelerators: list[dict[str, float | int | str]] = Field(default_factory=list)


class ErrorBody(BaseModel):
    error: str  # stable machine-readable code, e.g. "spec_conflict"
    detail: str | list[dict[str, object]]
