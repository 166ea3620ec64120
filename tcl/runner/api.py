"""The runner's wire schema (pydantic). The runner owns it; clients import it, never the app.

The OpenAPI spec is generated from these models and the route table in ``app.py``
(``tcl-runner openapi``).
"""

from __future__ import annotations

import enum
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from tcl.runner.limits import DEFAULT_GRACE_S, MAX_DURATION_S, MAX_GRACE_S

API_VERSION = 1

# Strings that become argv, environment or paths of the job: a NUL cannot pass exec(2), and an
# environment name cannot hold "=" (or be empty), so such specs are refused at submit (422)
# instead of failing when the job starts.
ExecStr = Annotated[str, StringConstraints(pattern=r"^[^\x00]*$")]
EnvName = Annotated[str, StringConstraints(pattern=r"^[^=\x00]+$")]


def _relative_inside(path: str) -> str:
    if path.startswith("/") or ".." in path.split("/"):
        raise ValueError("must be a relative path without '..'")
    return path


# A directory below the working dir: relative, never climbing out of it.
RelPath = Annotated[ExecStr, AfterValidator(_relative_inside)]
# a uv dependency group's name (PEP 735: letters, digits, ``-``, ``_``, ``.``)
GroupName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")]


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


# defer_build: a model's validator is built on its first use, not at import; the CLI imports
# this module for a few models and must start fast (a submit is timed from the keypress).
_LAZY = ConfigDict(defer_build=True)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


# Numbers are ``strict``: JSON ``true`` is not 1 (pydantic's lax mode would take it). Integers
# still fill float fields.


class CodeRef(_Strict):
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size: int = Field(ge=0, strict=True)


class CachedCodeRequest(_Strict):
    """Install the code from the host's tree cache instead of an upload (404 if absent)."""

    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class ClusterInfo(_Strict):
    """Where this process sits in a multi-node job (for ``jax.distributed.initialize``)."""

    node_rank: int = Field(default=0, ge=0, strict=True)
    nodes: int = Field(default=1, ge=1, strict=True)
    coordinator: ExecStr | None = None  # "host:port" of rank 0


class JobRef(_Strict):
    """A ``tcl.jobs`` job, run as ``python -m tcl.jobs.launch``."""

    key: ExecStr
    config_yaml: str = ""
    restore: ExecStr | None = None


class SessionKind(enum.StrEnum):
    """An interactive session: the runner builds its command and serves its port."""

    JUPYTER = "jupyter"  # Jupyter Lab in the job's working dir (``tcl repl``)
    REMOTE = "remote"  # the ``@tcl.remote`` call server (``tcl.remote.worker``)


class SessionSpec(_Strict):
    kind: SessionKind


class JobSpec(_Strict):
    """One job. It needs ``argv``, ``job`` or ``session`` (checked at submit); ``argv`` wins
    if several are given, then ``job``."""

    run_id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
    attempt: int = Field(default=0, ge=0, strict=True)
    name: ExecStr = ""
    project: ExecStr = ""
    group: ExecStr = ""
    # No shell unless the user asked for one; None (not []) when a ``job`` is run instead.
    argv: list[ExecStr] | None = Field(default=None, min_length=1)
    working_dir: ExecStr | None = None  # default: <state-dir>/work
    # Where the job starts, relative to working_dir (the code's root): the directory the user
    # submitted from, inside the snapshot. "" is the working dir itself.
    cwd: RelPath = ""
    env: dict[EnvName, ExecStr] = Field(default_factory=dict)
    # Injected into the job's environment only: never a file, argv or log line (masked as ***).
    secrets: dict[EnvName, ExecStr] = Field(default_factory=dict, repr=False)
    code: CodeRef | None = None  # None: the job needs no code upload
    max_duration_s: float | None = Field(default=None, gt=0, le=MAX_DURATION_S, strict=True)
    cluster: ClusterInfo = Field(default_factory=ClusterInfo)
    job: JobRef | None = None
    # An interactive session (``tcl repl``, ``@tcl.remote``): bound to the job's loopback and
    # reached only through ``WS /api/forward`` with this runner's token.
    session: SessionSpec | None = None
    # The job's project environment (``tcl.runner.projectenv``): its uv dependency groups
    # (``uv sync --group``), and whether to build it at all (False: the host's environment).
    uv_groups: list[GroupName] = Field(default_factory=list, max_length=64)
    project_env: bool = True


class StartRequest(_Strict):
    """``POST /api/start``: submit the spec, install its code from the host's tree cache and
    start the job, in one request (a placement's three). A tree the cache lacks is no error:
    the answer is ``waiting_code`` (``PUT /api/code``, then ``POST /api/run``)."""

    spec: JobSpec


class EventKind(enum.StrEnum):
    LOG = "log"
    STATE = "state"
    METRIC = "metric"  # a ``TCL_METRIC`` line of the job's stdout (``tcl.runner.metricline``)
    PHASE = "phase"  # the attempt reached a phase of its start (``metricline.Phase``): ``data``


class LogStream(enum.StrEnum):
    STDOUT = "stdout"
    STDERR = "stderr"
    RUNNER = "runner"


class Event(BaseModel):
    model_config = _LAZY

    seq: int  # strictly increasing from 1
    ts: float  # unix seconds
    kind: EventKind
    stream: LogStream | None = None
    data: str | None = None
    state: RunnerState | None = None
    exit_code: int | None = None
    pid: int | None = None  # the ``running`` state's: the job's process id (in its namespace)
    # a final state's, when the runner ended the job itself: ``hung`` (tcl.runner.hangwatch)
    reason: str | None = None


# ``tcl-runner batch --echo-events``: each event is also written to the runner's stdout as this
# prefix and the event's JSON line. A cluster that keeps a container's output (Kubernetes' pod
# log) then keeps every event, and the control plane reads the ones a dead runner can no longer
# serve from there (:func:`echoed_events`).
ECHO_PREFIX = "TCL_EVENT "


def echoed_events(text: str, after: int) -> list[Event]:
    """The events echoed in ``text`` (a container's output) with ``seq > after``, in order;
    other lines (the runner's own messages, a torn last line) are skipped."""
    out: list[Event] = []
    for line in text.splitlines():
        if not line.startswith(ECHO_PREFIX):
            continue
        try:
            ev = Event.model_validate_json(line[len(ECHO_PREFIX) :])
        except ValueError:  # pydantic's ValidationError: torn or foreign
            continue
        if ev.seq > max(after, out[-1].seq if out else 0):
            out.append(ev)
    return out


class EventsQuery(_Strict):
    """Query of ``GET /api/events``: events with ``seq > after``; ``wait`` long-polls.

    Queries are parsed from their strings (``model_validate_strings``), so strict fields still
    take ``?after=3`` but not ``true``."""

    after: int = Field(default=0, ge=0, strict=True)
    wait: float = Field(default=0.0, ge=0, le=60, strict=True)
    limit: int = Field(default=1000, ge=1, le=10_000, strict=True)


class LogsQuery(_Strict):
    """Query of ``WS /api/logs``."""

    after: int = Field(default=0, ge=0, strict=True)


class EventsPage(BaseModel):
    model_config = _LAZY

    events: list[Event]
    next: int  # pass as ``after`` to continue
    state: RunnerState
    exit_code: int | None = None
    more: bool  # more events are already available past ``next``
    # A stop signal reached the runner (an evicted pod, ``scancel``, a preempted node): the job
    # ended because its host is going away, not because a ``stop`` was asked over this API
    signalled: bool = False


class HealthInfo(BaseModel):
    model_config = _LAZY

    """Open to anyone (no token): the shim's probe learns here that a job has ended."""

    service: Literal["tcl-runner"] = "tcl-runner"
    version: str
    api_version: int = API_VERSION
    state: RunnerState
    exit_code: int | None = None
    # whether its job ever started (None: a runner too old to say). A runner stopped before its
    # job started (a placement undone) is `terminated` with started false: nothing of it ran
    started: bool | None = None


class StateInfo(BaseModel):
    model_config = _LAZY

    """The answer of submit, code, run and stop: where the runner is now."""

    state: RunnerState
    exit_code: int | None = None


class StopRequest(_Strict):
    """Signal the job's group, SIGKILL it ``grace_s`` later; a repeated stop can only bring
    that moment closer."""

    grace_s: float = Field(default=DEFAULT_GRACE_S, ge=0, le=MAX_GRACE_S, strict=True)
    # SIGABRT rather than SIGTERM: Python dumps every thread's stack into the log (the job has
    # PYTHONFAULTHANDLER), e.g. another node of the job was found hung (tcl.runner.hangwatch)
    dump_stacks: bool = Field(default=False, strict=True)


class Metrics(BaseModel):
    model_config = _LAZY

    """The job's process tree (all zero before it starts) and the accelerators the runner sees."""

    cpu_percent: float
    memory_bytes: int
    processes: int = 0
    accelerators: list[dict[str, float | int | str]] = Field(default_factory=list)


class ErrorBody(BaseModel):
    model_config = _LAZY

    error: str  # stable machine-readable code, e.g. "spec_conflict"
    detail: str | list[dict[str, object]]


class SessionInfo(BaseModel):
    model_config = _LAZY

    """``GET /api/session``: the job's interactive session, once its port accepts connections.

    ``token`` is the session's own secret (Jupyter's token; the remote worker's handshake key),
    made by the runner when the job starts; it leaves the runner only in this answer, which
    needs the runner's bearer token."""

    kind: SessionKind
    ready: bool
    token: str = ""
    python: str = ""  # the interpreter that runs it
    detail: str = ""  # why it is not ready (the job ended; still starting)


# -- live code sync (``tcl sync``) -----------------------------------------------------------

Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class SyncFile(_Strict):
    """One path's change. ``old_sha256`` is what the client believes the remote holds (None:
    absent); ``sha256`` what it must hold after (None: deleted). Content comes as ``data_b64``
    or, for a rename or copy, from ``copy_from`` (a path whose current content is ``sha256``).
    A symlink's ``sha256`` is that of its target string, given in ``link``."""

    path: RelPath = Field(min_length=1)
    old_sha256: Sha256 | None = None
    sha256: Sha256 | None = None
    mode: int = Field(default=0o644, ge=0, le=0o7777, strict=True)
    data_b64: str | None = None
    copy_from: RelPath | None = None
    link: ExecStr | None = None


class SyncPatch(_Strict):
    """A content-addressed change of the working tree: ``id`` is the sha256 of the canonical
    JSON of (base, new_base, files), so a retried patch is recognised and not applied twice."""

    id: Sha256
    base: str = Field(max_length=128)  # the tree id the client diffed against
    new_base: str = Field(max_length=128)  # the tree id once applied
    files: list[SyncFile] = Field(max_length=200_000)


class SyncAck(BaseModel):
    model_config = _LAZY

    base: str  # the tree id the working dir is at now
    applied: int  # paths changed by this patch (0 when ``already``)
    already: bool = False  # this patch id was applied before (a retry)
