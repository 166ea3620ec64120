"""The backend contract: a run's whole lifecycle on one host type.

Generic code (submit, follow, solver, CLI) talks to hosts only through :class:`Backend`, picked
from :data:`tcl.control.backends.table.BACKENDS` by the config's host ``type`` (or an attempt's
recorded backend kind). A backend gets narrow inputs (:class:`BackendInputs`: its hosts' config,
the clusters, the GRES mapping, the shared SSH pool), never the whole control plane.

The lifecycle (cf. dstack's Compute and SkyPilot's provisioner):

``offers(request)``  what it can place now, or queue (a batch scheduler)
``launch(plan, job, snapshot, observer) -> Handle``  every node started, or none (all or nothing)
``events(handle, node, after, wait_s)``  the runner's seq'd events of one node
``status(handle)`` / ``statuses(handles)``  the run's state now (batched where the host can)
``stop(handle, grace_s)``, ``release(handle)``, ``ssh_endpoint(handle, node)``

A handle is the backend's own typed, versioned pydantic model, stored as JSON in the attempt.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict

from tcl.control.states import RunState
from tcl.runner.api import RunnerState

if TYPE_CHECKING:
    from tcl.control.config import ClusterConfig, HostConfig
    from tcl.control.shipping import Snapshot
    from tcl.control.solver import Request
    from tcl.control.transport.agents import RunnerApi
    from tcl.control.transport.ssh import SshPool
    from tcl.runner.api import Event, JobSpec

Progress = Callable[[int, int], None]

HANDLE_VERSION = 1


class Observer(Protocol):
    """What a launch reports while it works (the CLI draws spinners and an upload bar)."""

    def status(self, text: str) -> None: ...

    def progress(self, done: int, total: int) -> None: ...

    def note(self, text: str) -> None: ...  # one line the user should read (not a status)


class Handle(BaseModel):
    """How to reach a launched run again: each backend's model extends this one."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    version: int = HANDLE_VERSION
    kind: str
    released: bool = False  # the host's resources are freed and every event is kept
    # False: written before the host was asked to make the task (a placer killed then leaves
    # a name to look for, not a task nobody knows of); the host may not have it
    made: bool = True

    @property
    def node_count(self) -> int:
        return 1

    @property
    def node_noun(self) -> str:
        """What the host calls one node (a TPU pod: a worker), in log prefixes and messages."""
        return "node"

    def task_label(self) -> str:
        """What the host calls the run (a task id, a SLURM job id), for the CLI."""
        return ""

    def names(self, task: HostTask) -> bool:
        """Whether ``task`` is one of this launch's (the orphan sweep's question)."""
        return False

    def places(self) -> list[NodePlace]:
        """Where each node runs, as far as the handle knows (``tcl ps --json``, the export)."""
        return []


@dataclass(frozen=True)
class NodePlace:
    """One node of a launch: the host (a config host, a SLURM job's, a pod), what the host calls
    the task there, and the accelerator indices it holds (empty: not known here)."""

    host: str
    task: str
    accelerators: list[int]


@dataclass(frozen=True)
class HostTask:
    """A task a host holds, as its backend lists them for the orphan sweep
    (:mod:`tcl.control.lifecycle.orphans`): which run and attempt its name says it is for."""

    host: str
    task_id: str
    run_id: str
    attempt: int
    age_s: float  # since the host made it


@dataclass(frozen=True)
class BackendInputs:
    """What a backend may use. ``hosts``: the config's hosts of its types, in solver order."""

    hosts: Mapping[str, HostConfig]
    clusters: Mapping[str, ClusterConfig]
    gres_mapping: Mapping[str, str]
    ssh_pool: Callable[[], SshPool]  # the shared pool, made on first use

    def cluster_of(self, host: str) -> ClusterConfig | None:
        """The cluster host ``host`` belongs to, if any."""
        cfg = self.hosts.get(host)
        name = cfg.cluster if cfg is not None else None
        return self.clusters.get(name) if name is not None else None


@dataclass(frozen=True)
class NodeOffer:
    host: str  # the config host that runs this node (a SLURM host: its login node's name)
    free: tuple[int, ...] = ()  # free accelerator indices there, when the host tells


@dataclass(frozen=True)
class Offer:
    """One way to place a request: ``nodes`` nodes of ``chips_per_node`` chips each.

    ``host`` is the config host (or, for several SSH hosts of one cluster, the cluster's name)
    the run is recorded on. ``starts_now`` is False for a scheduler that would queue it
    (``queue_reason`` says why); ``free`` ranks queueing hosts (most free chips first)."""

    backend: str
    host: str
    nodes: tuple[NodeOffer, ...]
    chip: str | None
    chips_per_node: int
    starts_now: bool = True
    queue_reason: str = ""
    free: int = 0
    order: int = 0  # solver order of the host (priority first, then file order)
    params: Mapping[str, str] = field(default_factory=dict)  # backend-specific (partition, ...)
    # Non-empty: taking this offer costs money or changes something the user owns (a cloud
    # node created): the text the user confirms first (`tcl submit --yes` confirms ahead)
    confirm: str = ""

    @property
    def node_count(self) -> int:
        return len(self.nodes)

    def describe(self) -> str:
        chips = f"{self.chips_per_node} x {self.chip or 'chip'}" if self.chips_per_node else "CPU"
        nodes = f"{self.node_count} nodes" if self.node_count > 1 else "1 node"
        extra = "".join(f", {k} {v}" for k, v in self.params.items())
        return f"{self.host}: {nodes}, {chips} per node{extra}"


@dataclass
class Offers:
    offers: list[Offer] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)  # host, why not


@dataclass(frozen=True)
class Launched:
    handle: Handle
    accelerators: list[list[int]]  # per node, the indices held (empty when unknown)
    uploaded_bytes: int = 0
    ssh: bool = False  # whether `tcl ssh` can reach it
    state: RunState = RunState.RUNNING  # QUEUED: a scheduler holds it until nodes free up


@dataclass(frozen=True)
class NodePage:
    """A page of one node's events and that node's state (already in the run's terms)."""

    events: list[Event]
    state: RunState
    more: bool = False
    exit_code: int | None = None
    message: str = ""  # why it waits (a queue's reason) or how it ended when no event says
    # The scheduler put the run back in its queue (preemption, requeue): the handle of its
    # next attempt, which the store numbers.
    next_attempt: Handle | None = None
    # The host lost the run (a preempted cloud node): the control plane places it again as
    # its next attempt (`message` says why).
    lost: bool = False
    # The host stopped the run because it is going away (the shim's preemption notice): a retry
    # policy places it again without counting a failure.
    preempted: bool = False


@dataclass(frozen=True)
class RunStatus:
    state: RunState
    exit_code: int | None = None
    message: str = ""
    # the host knows for sure that its job never started (``terminated`` before it ran: a
    # placement undone); whoever adopts an unfinished placement places the run again
    never_started: bool = False


@dataclass(frozen=True)
class SshEndpoint:
    """Where ``tcl ssh`` lands: the container sshd, reached through the host as ProxyJump;
    or, with ``remote_argv``, a command run on the host that opens the shell (``srun --pty``);
    or, with ``local_env_file``, a shell on this machine; or, with ``session``, a stream this
    process relays (a pod's ``pods/exec``)."""

    host: str  # HostName of the jump host
    port: int | None
    user: str | None
    identity_file: str | None
    known_hosts: str | None
    proxy_jump: str | None  # further hops before the host
    container_port: int | None = None  # the container sshd's port on the host's loopback
    ssh_config_file: str | None = None
    remote_argv: tuple[str, ...] = ()  # run on the host (with the user's command appended)
    # the same for an interactive shell (a terminal wanted: ``srun --pty``); () is remote_argv
    remote_tty_argv: tuple[str, ...] = ()
    # a task on this machine (the local default's process executor): no ssh at all, a shell
    # here that sources this file (the job's dir and env, written by its runner)
    local_env_file: str | None = None
    # a session this process runs itself (a Kubernetes pod's exec stream): called with the
    # command (empty: a shell), it relays this terminal and returns the exit code
    session: Callable[[list[str]], int] | None = None


@dataclass(frozen=True)
class HostCheck:
    reachable: bool
    detail: str  # what it offers, or why it cannot be used
    info: Any = None  # the host's own report (a shim's HostInfo), for `tcl hosts --json`


class Backend(abc.ABC):
    kind: ClassVar[str]
    handle_model: ClassVar[type[Handle]]
    # Whether :meth:`runner` hands out a node's runner API (interactive sessions need it):
    # the solver skips other hosts for a session.
    interactive: ClassVar[bool] = False
    # Whether its jobs run on the submitting machine: they then start from the submitting
    # shell's base variables (``PATH``...: tcl.agentenv.submitter_env), not the daemon's.
    runs_here: ClassVar[bool] = False

    def __init__(self, inputs: BackendInputs) -> None:
        self.inputs = inputs

    @abc.abstractmethod
    async def offers(self, req: Request, hosts: Sequence[str]) -> Offers:
        """What ``hosts`` (of this backend) can place now (or queue), and why others cannot."""

    @abc.abstractmethod
    async def launch(
        self,
        plan: Offer,
        job: JobSpec,
        snap: Snapshot,
        image: str | None,
        obs: Observer,
        on_handle: Callable[[Handle], None],
    ) -> Launched:
        """Start ``job`` (``cluster`` filled per node here) on every node of ``plan``: all or
        nothing. ``on_handle`` is called as soon as something exists on the host (so a crash
        later still finds it); on any failure what was started is stopped and released before
        the error propagates. Raises ``NoCapacityError`` when the host refused for capacity."""

    @abc.abstractmethod
    def dry_run(self, plan: Offer, job: JobSpec, image: str | None) -> str:
        """What :meth:`launch` would send for ``plan`` (a batch script, task specs, a manifest),
        with no side effect and no secret value in it (``tcl submit --dry-run``)."""

    @abc.abstractmethod
    async def events(self, handle: Handle, node: int, after: int, wait_s: float) -> NodePage:
        """Events of ``node`` after seq ``after`` (long-polls up to ``wait_s``)."""

    @abc.abstractmethod
    async def status(self, handle: Handle) -> RunStatus:
        """The run's state now, without its events."""

    async def statuses(self, handles: Sequence[Handle]) -> list[RunStatus | Exception]:
        """Many runs' states (``tcl ps``): one round trip per host where the host allows."""
        out: list[RunStatus | Exception] = []
        for h in handles:
            try:
                out.append(await self.status(h))
            except Exception as e:
                out.append(e)
        return out

    @abc.abstractmethod
    async def stop(self, handle: Handle, grace_s: float, dump_stacks: bool = False) -> None:
        """Ask every node's job to end (SIGTERM, SIGKILL after ``grace_s``). ``dump_stacks``:
        SIGABRT rather than SIGTERM where the host's runner can send it (shim hosts), so each
        node's Python stacks reach its log (another node was found hung)."""

    @abc.abstractmethod
    async def release(self, handle: Handle, state: RunState) -> None:
        """Free what the run holds on the host (its accelerators, runner, files): called once
        every event is kept locally and the run is final."""

    def ssh_endpoint(self, handle: Handle, node: int) -> SshEndpoint | None:
        """Where ``tcl ssh`` connects for ``node`` of the run (None: not possible)."""
        return None

    async def runner(self, handle: Handle, node: int) -> RunnerApi:
        """A fresh client for ``node``'s runner API, for interactive work (``tcl repl``'s
        forward, ``tcl sync``, ``@tcl.remote``); the caller closes it. Re-resolved on each
        call, so one made after :meth:`reset` goes through new connections."""
        from tcl.control.errors import TclError

        raise TclError(f"{self.kind} hosts do not run interactive sessions")

    def load_handle(self, raw: Mapping[str, Any]) -> Handle:
        return self.handle_model.model_validate(dict(raw))

    @abc.abstractmethod
    async def check(self, host: str) -> HostCheck:
        """``tcl hosts --check``: can the host be reached and what does it offer now."""

    async def teardown(self, host: str) -> str:
        """Delete what the backend created for ``host`` (a cloud node): ``tcl host down``."""
        from tcl.control.errors import TclError

        raise TclError(f"{host}: nothing to take down (its type creates nothing)")

    def address(self, host: str) -> str:
        """How ``tcl hosts`` names where a host is."""
        return str(getattr(self.inputs.hosts.get(host), "ssh", "") or "")

    async def reset(self, handle: Handle | None = None) -> None:
        """Forget connections after an error, so the next call reconnects."""
        return None

    async def host_tasks(self, host: str) -> list[HostTask]:
        """The tasks of tcl runs ``host`` holds, for the orphan sweep; none where the host
        cannot list them (this backend's hosts are not swept)."""
        return []

    async def end_task(self, task: HostTask) -> None:
        """End and remove a task no attempt names (its chips freed)."""
        raise NotImplementedError(f"{self.kind} hosts list no tasks")

    async def aclose(self) -> None:
        """Release connections (never stops remote work)."""
        return None


# what a runner's own state means for the run, on every backend that runs the runner
RUNNER_STATES = {
    RunnerState.WAITING_SPEC: RunState.PROVISIONING,
    RunnerState.WAITING_CODE: RunState.PROVISIONING,
    RunnerState.READY: RunState.PROVISIONING,
    RunnerState.RUNNING: RunState.RUNNING,
    RunnerState.SUCCEEDED: RunState.SUCCEEDED,
    RunnerState.FAILED: RunState.FAILED,
    RunnerState.TERMINATED: RunState.TERMINATED,
}


def worst_state(states: Sequence[RunState]) -> RunState:
    """A multi-node run's state from its nodes': all final → the worst outcome; else the least
    advanced live state (queued < provisioning < running)."""
    if all(s.is_final for s in states):
        for s in (RunState.FAILED, RunState.TERMINATED):
            if s in states:
                return s
        return RunState.SUCCEEDED
    for s in (RunState.QUEUED, RunState.PENDING, RunState.PROVISIONING, RunState.RUNNING):
        if s in states:
            return s
    return RunState.RUNNING
