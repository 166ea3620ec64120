"""Where this runner's job sits in a multi-node job: node rank, node count, coordinator, attempt.

tcl starts one runner, hence one job process, per node. A spec sent to each node separately
(the shim path) carries an explicit ``cluster``; a spec shared by every node (SLURM, Volcano)
cannot, so each runner reads its place from what its scheduler put in its environment:

    source    node rank          nodes           set by
    spec      cluster.node_rank  cluster.nodes   the control plane (wins when nodes > 1)
    tcl       TCL_NODE_RANK      TCL_NODES       a batch script or manifest exporting both
    slurm     SLURM_PROCID       SLURM_NTASKS    srun (one task per node)
    volcano   VC_TASK_INDEX      TCL_NODES       Volcano's env plugin; the manifest sets TCL_NODES

The first row whose two variables are set (an empty one counts as unset) wins; none: a single
node. The coordinator is the spec's, else
``TCL_COORDINATOR``, else ``JAX_COORDINATOR_ADDRESS`` from the runner's environment (what the
SLURM batch script exports, from the first node's address), else, under Volcano, the first host
of the svc plugin's ``VC_WORKER_HOSTS`` (rank 0's pod, ``<pod>.<job>``) with the port the
manifest puts in ``TCL_COORDINATOR_PORT`` (JAX does not detect Volcano itself). The attempt is
the spec's, raised to ``SLURM_RESTART_COUNT`` or ``TCL_RESTART_COUNT`` (a Volcano pod's
``volcano.sh/job-retry-count``): a requeued or restarted job runs again from the same spec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tcl.runner import nodeenv
from tcl.runner.api import ClusterInfo, JobSpec
from tcl.runner.errors import InvalidSpec


@dataclass(frozen=True)
class EnvSource:
    """One scheduler's way of telling a process its place (a row of the table above)."""

    name: str
    rank_var: str
    nodes_var: str


ENV_SOURCES = (
    EnvSource("tcl", nodeenv.NODE_RANK, nodeenv.NODES),
    EnvSource("slurm", "SLURM_PROCID", "SLURM_NTASKS"),
    EnvSource("volcano", "VC_TASK_INDEX", nodeenv.NODES),
)
# Scheduler counters of how often this very job was started again from the same spec.
RESTART_COUNT_VARS = ("SLURM_RESTART_COUNT", "TCL_RESTART_COUNT")
COORDINATOR_VARS = (nodeenv.COORDINATOR, nodeenv.JAX_COORDINATOR_ADDRESS)
VOLCANO_HOSTS_VAR = "VC_WORKER_HOSTS"  # svc plugin: VC_<TASK>_HOSTS of tcl's one task, worker
COORDINATOR_PORT_VAR = "TCL_COORDINATOR_PORT"


@dataclass(frozen=True)
class Placement:
    """The effective place of this runner's job; ``source`` names the row that gave it
    ("spec", an ``EnvSource`` name, or "single" when nothing said more than one node)."""

    cluster: ClusterInfo
    attempt: int
    source: str

    def describe(self) -> str:
        c = self.cluster
        where = f"node {c.node_rank} of {c.nodes} ({self.source})"
        coordinator = f", coordinator {c.coordinator}" if c.coordinator else ", no coordinator"
        return f"{where}{coordinator}, attempt {self.attempt}"


def resolve_placement(spec: JobSpec, env: Mapping[str, str]) -> Placement:
    """The spec's cluster and attempt, completed from the scheduler's ``env``; ``InvalidSpec``
    (field "cluster") naming the variable when one holds no valid number."""
    coordinator = (
        spec.cluster.coordinator or _first(env, COORDINATOR_VARS) or _volcano_coordinator(env)
    )
    restarts = [_number(env, v, 0) for v in RESTART_COUNT_VARS if _is_set(env, v)]
    attempt = max([spec.attempt, *restarts])
    if spec.cluster.nodes > 1:
        cluster = spec.cluster.model_copy(update={"coordinator": coordinator})
        return Placement(cluster, attempt, "spec")
    for source in ENV_SOURCES:
        if _is_set(env, source.rank_var) and _is_set(env, source.nodes_var):
            rank = _number(env, source.rank_var, 0)
            nodes = _number(env, source.nodes_var, 1)
            if rank >= nodes:
                raise InvalidSpec(
                    "cluster",
                    f"{source.rank_var}={rank} is not below {source.nodes_var}={nodes}",
                )
            cluster = ClusterInfo(node_rank=rank, nodes=nodes, coordinator=coordinator)
            return Placement(cluster, attempt, source.name)
    if _is_set(env, nodeenv.NODES) and _number(env, nodeenv.NODES, 1) > 1:
        raise InvalidSpec(
            "cluster",
            f"{nodeenv.NODES}={env[nodeenv.NODES]} but no node rank: set {nodeenv.NODE_RANK} "
            "(or run under srun, or Volcano's env plugin)",
        )
    return Placement(ClusterInfo(coordinator=coordinator), attempt, "single")


def _is_set(env: Mapping[str, str], name: str) -> bool:
    return bool(env.get(name, "").strip())


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    return next((env[n].strip() for n in names if _is_set(env, n)), None)


def _number(env: Mapping[str, str], name: str, minimum: int) -> int:
    text = env[name].strip()
    if not (text.isascii() and text.isdigit()) or int(text) < minimum:
        raise InvalidSpec("cluster", f"{name}={env[name]!r} is not a whole number >= {minimum}")
    return int(text)


def _volcano_coordinator(env: Mapping[str, str]) -> str | None:
    """Rank 0's pod (the first of the svc plugin's hosts) and the manifest's port."""
    if not (_is_set(env, VOLCANO_HOSTS_VAR) and _is_set(env, COORDINATOR_PORT_VAR)):
        return None
    first = env[VOLCANO_HOSTS_VAR].split(",")[0].strip()
    return f"{first}:{_number(env, COORDINATOR_PORT_VAR, 1)}" if first else None
