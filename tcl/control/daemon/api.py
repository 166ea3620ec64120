"""Wire schema of the ``tcl serve`` daemon: the workstation's local agent.

The daemon keeps what makes a command slow warm between commands (SSH connections and their
forwards, the state store, the shims' addresses and tokens), and runs ``tcl submit`` for the
CLI: the CLI sends a :class:`SubmitRequest` and reads back a stream of :class:`Line` (one JSON
object per line: what the submit is doing, its result, then the run's log events until it ends).

Served on the Unix socket ``<state dir>/serve/daemon.sock`` (only this user can connect:
``tcl.localsock``). Routes:

- ``GET  /api/healthcheck``                 -> :class:`Health`
- ``POST /api/submit``                      :class:`SubmitRequest` -> stream of :class:`Line`
- ``POST /api/submissions/{id}/cancel``     204; the submit's stream ends with its error line
- ``POST /api/follow``                      :class:`FollowRequest` -> stream of :class:`Line`
                                            (its events after ``after``, then ``end``; with
                                            ``once``, the kept ones only)
- ``POST /api/runs``                        :class:`~tcl.control.runlisting.ListRequest` ->
                                            :class:`~tcl.control.runlisting.RunListing`
                                            (``tcl ps``: non-final runs refreshed)
- ``POST /api/hosts``                       :class:`~tcl.control.hostlisting.HostsRequest` ->
                                            :class:`~tcl.control.hostlisting.HostListing`
                                            (``tcl hosts``: with ``check``, each host asked)
- ``POST /api/stop``                        :class:`StopRequest` -> :class:`RunEnd` (once the
                                            job is stopped and its accelerators are free)
- ``POST /api/hosts/{name}/forget``         204; drop what is cached about a host
- ``GET  /api/status``                      -> :class:`Status`
- ``POST /api/shutdown``                    204; the daemon exits once its streams end

A request the user got wrong (an unknown run or matrix, a config error) is answered 400 with a
:class:`Failure`: the message the CLI prints, and its exit code.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from tcl.control.lifecycle.retry_policy import RetryPolicy
from tcl.control.logcache import KeptEvent
from tcl.control.submitted import SubmitResult
from tcl.runner.api import GroupName, JobRef, SessionKind

API_VERSION = 1


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Identity(_Strict):
    """What a daemon was started with; a client whose own differs starts a new daemon (the
    code changed, or the database or home it would work on is not the one it has)."""

    version: str
    source: str  # a fingerprint of the tcl package's files (an edited checkout differs)
    db: str  # a hash of the state store's URL
    home: str
    ssh_agent: str  # $SSH_AUTH_SOCK
    # where its tcl package is: another install (a tool install, a project's venv) of the same
    # version shares the daemon; of another version it is refused, never replaced
    root: str = ""


class Health(_Strict):
    api_version: int
    pid: int
    identity: Identity


class SubmitRequest(_Strict):
    """``tcl submit``'s flags, resolved in the user's shell (secrets read from its environment,
    the config file's path found); the daemon does the rest."""

    config_path: str
    config_named: bool  # the user named the file (then it must exist)
    cwd: str
    code_dir: str | None = None
    committed: bool = False  # ship HEAD, not the working tree
    argv: list[str] = Field(default_factory=list)
    name: str = ""
    chip: str | None = None
    chips: int = Field(default=0, ge=0)
    nodes: int = Field(default=0, ge=0)  # 0: as many as the chips need
    host: str | None = None
    clusters: list[str] = Field(default_factory=list)  # only hosts of these (--cluster)
    avoid_clusters: list[str] = Field(default_factory=list)  # no host of these
    image: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    # the submitting shell's base variables (PATH, LANG...: tcl.agentenv.submitter_env); a job
    # on this machine starts from them rather than from the daemon's
    submitter_base: dict[str, str] = Field(default_factory=dict)
    secrets: dict[str, str] = Field(default_factory=dict, repr=False)  # never logged nor stored
    uv_groups: list[GroupName] = Field(default_factory=list)  # the project environment's groups
    project_env: bool = True  # False: the job runs in the host's environment
    max_duration_s: float | None = Field(default=None, gt=0)
    job: JobRef | None = None
    follow: bool = True
    options: dict[str, str] = Field(default_factory=dict)  # backend options (tpu.version, down)
    yes: bool = False  # confirmed: a plan may create something billed (a TPU node)
    retry: RetryPolicy | None = None  # place the run again when it fails or is preempted
    session: SessionKind | None = None  # an interactive session (`tcl repl`, `@tcl.remote`)


class FollowRequest(_Strict):
    """Follow a run's logs (a CLI whose stream dropped resumes after the last event it printed).

    ``once`` (``tcl logs`` without ``-f``): ask the run's host for what is not kept yet, send
    the kept log events after ``after`` and end (``end`` then names the run, not its end);
    ``run`` may then be empty: the newest run."""

    config_path: str
    config_named: bool
    run: str  # a run id or unique prefix or name
    after: int = Field(default=0, ge=0)
    once: bool = False


class StopRequest(_Strict):
    """``tcl stop``: the run (empty: the one run not yet ended), SIGKILL after ``grace_s``."""

    config_path: str
    config_named: bool
    run: str = ""
    grace_s: float = Field(default=10.0, ge=0)


class LineKind(StrEnum):
    ACCEPTED = "accepted"  # submission: its id (to cancel it)
    STATUS = "status"  # text: what the submit waits for now
    PROGRESS = "progress"  # done, total: code upload bytes
    NOTE = "note"  # text: one line the user should read
    SUBMITTED = "submitted"  # result: the run started
    EVENT = "event"  # event: one of the run's events (log, state, metric: print log ones only)
    RECONNECTING = "reconnecting"  # text: the host's connection dropped; following resumes
    END = "end"  # run: the run ended and every event was sent
    ERROR = "error"  # text, exit_code: the submit or follow failed (cancelled: Ctrl-C)


class RunEnd(_Strict):
    run_id: str
    state: str
    exit_code: int | None = None


class Line(_Strict):
    kind: LineKind
    text: str = ""
    done: int = 0
    total: int = 0
    submission: str | None = None
    result: SubmitResult | None = None
    event: KeptEvent | None = None  # as kept locally: run-wide seq, node, attempt
    run: RunEnd | None = None
    exit_code: int = 1
    cancelled: bool = False


class Failure(_Strict):
    """A 400's body: a ``TclError`` of the request (what the CLI prints, its exit code)."""

    detail: str
    exit_code: int = 1


class LoopHealth(_Strict):
    """One of the daemon's long-running loops (the sweep scheduler...), as its supervisor sees
    it: a loop that dies is logged and started again after a backoff; an error it survives
    (the state store unreachable for a while) is counted here too."""

    name: str
    running: bool
    restarts: int = 0  # times it died (or ended) and was started again
    errors: int = 0  # errors it died of or survived
    last_error: str = ""
    last_error_at: float | None = None  # epoch seconds


class Status(_Strict):
    pid: int
    uptime_s: float
    ssh_connects: int  # SSH connections opened since the daemon started
    streams: int  # submits and follows being served now
    submits: int  # submits served since start
    scheduler: str | None = None  # its id as a sweep scheduler (None: it schedules none)
    entries_running: int = 0  # matrix entries it follows now
    entries_placed: int = 0  # matrix entries it placed since start
    controller: str | None = None  # its id as a run controller (the owner its leases name)
    runs_owned: int = 0  # runs its controller owns now (follows, moves on, frees)
    loops: list[LoopHealth] = Field(default_factory=list)
