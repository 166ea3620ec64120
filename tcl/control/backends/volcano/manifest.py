"""A run's Volcano Job (``batch.volcano.sh/v1alpha1`` ``Job``) and its helpers, as typed data.

One attempt of a run is one vcjob named ``tcl-<run id>-<attempt>``: one task ``worker`` of
``replicas`` pods (one per node), gang-scheduled (``minAvailable`` = replicas, job and task).
Each pod runs ``tcl-runner batch`` on the run's one spec file, so every pod learns its place from
its environment (:mod:`tcl.runner.cluster`): ``VC_TASK_INDEX`` (the ``env`` plugin) is the rank,
``TCL_NODES`` the count, ``TCL_COORDINATOR`` rank 0's stable DNS name from the ``svc`` plugin
(``<job>-worker-0.<job>``; ``--publish-not-ready-addresses`` makes it resolve before the pod is
Ready, research note C2).

What sits where::

    Secret <job>-spec, key spec.json   -> /etc/tcl/spec.json (read-only, mode 0400)
    PVC <pvc_name>                     -> <pvc_mount_path>
      tcl/code/<sha256>.tar.gz            the code, written once by the helper pod
      tcl/runs/<run id>/<attempt>/<pod>   each pod's runner state dir (events, status.json)
    emptyDir (Memory, shm_size)        -> /dev/shm

Failure policy: an evicted pod (preemption, node drain) restarts the whole job, up to
``max_retry`` times: the gang must start together and the job resumes from its checkpoint. A
pod that *fails* (its runner exited non-zero: the user's code failed) terminates the job at
once: the other ranks would otherwise hang in a collective, and a restart would only repeat a
deterministic error. tcl's own retry policy decides about a new attempt (a new vcjob).
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from tcl.control.backends.volcano import k8s
from tcl.control.config import VolcanoHost
from tcl.control.errors import ConfigError
from tcl.runner.nodeenv import COORDINATOR, COORDINATOR_PORT_BASE, NODES

API_VERSION: Literal["batch.volcano.sh/v1alpha1"] = "batch.volcano.sh/v1alpha1"
SCHEDULER = "volcano"
DEFAULT_QUEUE = "default"
TASK_NAME = "worker"
CONTAINER_NAME = "runner"
RUNNER_ARGV0 = "tcl-runner"  # on the image's PATH
SPEC_DIR = "/etc/tcl"
SPEC_KEY = "spec.json"
SPEC_MODE = 0o400
SHM_PATH = "/dev/shm"  # noqa: S108 (a mount point inside the pod, not a temp file)
COORDINATOR_PORT = COORDINATOR_PORT_BASE  # each pod has its own network namespace
HELPER_SLEEP_S = 3600
# A runner serves its job's last events this long after the job ended; tcl deletes the Job as
# soon as it kept them (release), so this bounds only what a run nobody follows holds. Events
# nobody fetched by then are read from the pod's log (the runner echoes them there).
RUNNER_LINGER_S = 60.0
LABEL_RUN_ID = "tcl.run-id"
LABEL_ATTEMPT = "tcl.attempt"
LABEL_HELPER = "tcl.helper"
ANNOTATION_RUN_NAME = "tcl.run-name"
RUN_ID_ENV = "TCL_RUN_ID"
POD_NAME_ENV = "POD_NAME"
POD_IP_ENV = "POD_IP"
# How often Volcano restarted the Job (its pods' annotation): the runner's attempt is raised by
# it (tcl.runner.cluster) and each restart's runner state goes to a dir of its own
RESTART_COUNT_ENV = "TCL_RESTART_COUNT"
RETRY_COUNT_ANNOTATION = "volcano.sh/job-retry-count"
# Where the runner writes the job's working dir and env for `tcl ssh` sessions (the runner reads
# this variable; an exec session sources the file): in the pod's state dir on the PVC
SHELL_ENV_ENV = "TCL_RUNNER_SSH_ENV_FILE"
SHELL_ENV_FILE = "shell-env.sh"

# A pod's hostname is its name (svc plugin) and must be a DNS label (<= 63): "<job>-worker-<i>"
# leaves the job name 63 - len("-worker-") - 7 index digits.
MAX_JOB_NAME_CHARS = 63 - len(f"-{TASK_NAME}-") - 7
_NOT_DNS = re.compile(r"[^a-z0-9-]+")


# --- the Volcano Job's own fields (the CRD's names; pod template parts are in k8s.py) ---


class LifecyclePolicy(k8s.K8sModel):
    event: Literal["PodEvicted", "PodFailed", "TaskCompleted", "Unknown"]
    action: Literal["RestartJob", "TerminateJob", "AbortJob", "CompleteJob", "RestartTask"]


class TaskSpec(k8s.K8sModel):
    name: str
    replicas: int
    min_available: int
    template: k8s.PodTemplateSpec


class JobSpec(k8s.K8sModel):
    scheduler_name: str = SCHEDULER
    queue: str
    min_available: int
    max_retry: int
    priority_class_name: str | None = None
    plugins: dict[str, list[str]]
    policies: list[LifecyclePolicy]
    tasks: list[TaskSpec]


class VcJob(k8s.K8sModel):
    api_version: Literal["batch.volcano.sh/v1alpha1"] = API_VERSION
    kind: Literal["Job"] = "Job"
    metadata: k8s.ObjectMeta
    spec: JobSpec


# --- inputs ---


@dataclass(frozen=True)
class PodPlan:
    """How a request maps onto pods: one pod per node, the same GPU count in each."""

    replicas: int
    gpus_per_pod: int


@dataclass(frozen=True)
class VolcanoRun:
    """One attempt of a run, as its manifest needs it (beside the host's config)."""

    run_id: str
    attempt: int
    code_sha256: str
    spec_secret: str  # the Secret holding spec.json (spec_secret_manifest)
    name: str = ""  # the run's name, kept as an annotation
    env: Mapping[str, str] = field(default_factory=dict)
    image: str | None = None  # --volcano-image (default: the host's image)
    namespace: str | None = None  # --volcano-namespace (default: the host's namespace)


def plan_pods(host: VolcanoHost, chip: str | None, count: int) -> PodPlan:
    """``count`` GPUs of ``chip`` as pods: as few pods as the per-node count allows, the GPUs
    spread evenly (16 with 8 per node: 2 x 8; 4: 1 x 4; 12: 2 x 6)."""
    per_node = (host.chips.get(chip.lower()) if chip else None) or host.gpus_per_node
    if count <= 0:
        return PodPlan(replicas=host.num_nodes, gpus_per_pod=0)
    if not per_node:
        raise ConfigError(
            f"volcano host: no GPUs per node for {chip or 'gpu'} (chips: or gpus_per_node:)"
        )
    replicas = math.ceil(count / per_node)
    return PodPlan(replicas=replicas, gpus_per_pod=math.ceil(count / replicas))


def vcjob_name(run_id: str, attempt: int) -> str:
    """``tcl-<run id>-<attempt>`` as a DNS-1123 label short enough for its pods' hostnames; a
    long run id keeps its head and a hash of the whole (still unique)."""
    base = _NOT_DNS.sub("-", run_id.lower()).strip("-") or "run"
    budget = MAX_JOB_NAME_CHARS - len("tcl-") - len(f"-{attempt}")
    if len(base) > budget:
        digest = hashlib.sha256(run_id.encode()).hexdigest()[:6]
        base = f"{base[: budget - 7].rstrip('-')}-{digest}"
    return f"tcl-{base}-{attempt}"


def spec_secret_name(job_name: str) -> str:
    return f"{job_name}-spec"


def code_path(host: VolcanoHost, sha256: str) -> str:
    return f"{_pvc_root(host)}/code/{sha256}.tar.gz"


def state_dir(
    host: VolcanoHost,
    run_id: str,
    attempt: int,
    pod: str = f"r$({RESTART_COUNT_ENV})/$({POD_NAME_ENV})",
) -> str:
    """A pod's runner state dir; by default with ``$(TCL_RESTART_COUNT)`` and ``$(POD_NAME)``,
    which Kubernetes expands (a restarted Job's pods have the same names)."""
    return f"{_pvc_root(host)}/runs/{run_id}/{attempt}/{pod}"


def _pvc_root(host: VolcanoHost) -> str:
    return f"{host.pvc_mount_path.rstrip('/')}/tcl"


# --- the manifests ---


def vcjob(host: VolcanoHost, plan: PodPlan, run: VolcanoRun) -> VcJob:
    name = vcjob_name(run.run_id, run.attempt)
    labels = {LABEL_RUN_ID: run.run_id, LABEL_ATTEMPT: str(run.attempt)}
    plugins: dict[str, list[str]] = {"svc": ["--publish-not-ready-addresses"], "env": []}
    if host.ssh:
        plugins["ssh"] = []
    return VcJob(
        metadata=k8s.ObjectMeta(
            name=name,
            namespace=_namespace(host, run),
            labels=labels,
            annotations={ANNOTATION_RUN_NAME: run.name} if run.name else None,
        ),
        spec=JobSpec(
            queue=host.queue or DEFAULT_QUEUE,
            min_available=plan.replicas,
            max_retry=host.max_retry,
            priority_class_name=host.priority_class,
            plugins=plugins,
            policies=[
                LifecyclePolicy(event="PodEvicted", action="RestartJob"),
                LifecyclePolicy(event="PodFailed", action="TerminateJob"),
            ],
            tasks=[
                TaskSpec(
                    name=TASK_NAME,
                    replicas=plan.replicas,
                    min_available=plan.replicas,
                    template=k8s.PodTemplateSpec(
                        metadata=k8s.TemplateMeta(labels=labels),
                        spec=_pod_spec(host, plan, run, name),
                    ),
                )
            ],
        ),
    )


def vcjob_manifest(host: VolcanoHost, plan: PodPlan, run: VolcanoRun) -> dict[str, Any]:
    """The vcjob as the API takes it (camelCase keys, nothing unset)."""
    return vcjob(host, plan, run).dump()


def _pod_spec(host: VolcanoHost, plan: PodPlan, run: VolcanoRun, job: str) -> k8s.PodSpec:
    volumes = [
        k8s.Volume(name="work", persistent_volume_claim=k8s.PvcSource(claim_name=host.pvc_name)),
        k8s.Volume(
            name="spec",
            secret=k8s.SecretSource(secret_name=run.spec_secret, default_mode=SPEC_MODE),
        ),
    ]
    mounts = [
        k8s.VolumeMount(name="work", mount_path=host.pvc_mount_path),
        k8s.VolumeMount(name="spec", mount_path=SPEC_DIR, read_only=True),
    ]
    if host.shm_size:
        volumes.append(
            k8s.Volume(
                name="shm", empty_dir=k8s.EmptyDirSource(medium="Memory", size_limit=host.shm_size)
            )
        )
        mounts.append(k8s.VolumeMount(name="shm", mount_path=SHM_PATH))
    container = k8s.Container(
        name=CONTAINER_NAME,
        image=_image(host, run.image),
        command=_runner_argv(host, run),
        env=_env(host, plan, run, job),
        ports=[k8s.ContainerPort(name="runner", container_port=host.runner_port)],
        resources=_resources(host, plan),
        volume_mounts=mounts,
        # RDMA verbs pin memory: without IPC_LOCK, NCCL's ibverbs transport fails to register it
        security_context=(
            k8s.SecurityContext(capabilities=k8s.Capabilities(add=["IPC_LOCK"]))
            if host.rdma
            else None
        ),
    )
    return k8s.PodSpec(
        containers=[container],
        restart_policy="Never",
        volumes=volumes,
        node_selector=dict(host.node_selector) or None,
        tolerations=[k8s.Toleration(**t.model_dump(exclude_none=True)) for t in host.tolerations]
        or None,
        priority_class_name=host.priority_class,
        service_account_name=host.service_account,
    )


def _runner_argv(host: VolcanoHost, run: VolcanoRun) -> list[str]:
    argv = [RUNNER_ARGV0, "batch", "--spec", f"{SPEC_DIR}/{SPEC_KEY}"]
    argv += ["--code", code_path(host, run.code_sha256)]
    argv += ["--serve", f"0.0.0.0:{host.runner_port}", "--linger-s", f"{RUNNER_LINGER_S:g}"]
    argv.append("--echo-events")  # the pod log keeps what a gone runner can no longer serve
    return [*argv, "--state-dir", state_dir(host, run.run_id, run.attempt)]


def _resources(host: VolcanoHost, plan: PodPlan) -> k8s.ResourceRequirements | None:
    amounts: dict[str, str] = {}
    if plan.gpus_per_pod:
        amounts[host.gpu_resource_key] = str(plan.gpus_per_pod)
    if host.rdma:
        amounts[host.rdma_resource_key] = str(host.rdma_per_node or 1)
    if host.cpu:
        amounts["cpu"] = host.cpu
    if host.memory:
        amounts["memory"] = host.memory
    # Extended resources (GPUs, RDMA) need requests == limits; cpu/memory get a guaranteed pod.
    return k8s.ResourceRequirements(limits=amounts, requests=dict(amounts)) if amounts else None


def _env(host: VolcanoHost, plan: PodPlan, run: VolcanoRun, job: str) -> list[k8s.EnvVar]:
    values = {**host.env, **run.env}
    values.update(
        {
            NODES: str(plan.replicas),
            RUN_ID_ENV: run.run_id,
            COORDINATOR: f"{job}-{TASK_NAME}-0.{job}:{COORDINATOR_PORT}",
        }
    )
    for name in (POD_IP_ENV, POD_NAME_ENV, RESTART_COUNT_ENV, SHELL_ENV_ENV):
        values.pop(name, None)
    shell_env = f"{state_dir(host, run.run_id, run.attempt)}/{SHELL_ENV_FILE}"
    return [
        *(k8s.EnvVar(name=k, value=v) for k, v in values.items()),
        k8s.EnvVar.from_field(POD_IP_ENV, "status.podIP"),
        k8s.EnvVar.from_field(POD_NAME_ENV, "metadata.name"),
        k8s.EnvVar.from_field(
            RESTART_COUNT_ENV, f"metadata.annotations['{RETRY_COUNT_ANNOTATION}']"
        ),
        # after the two it names: Kubernetes expands $(VAR) from the variables before it
        k8s.EnvVar(name=SHELL_ENV_ENV, value=shell_env),
    ]


def _image(host: VolcanoHost, override: str | None) -> str:
    image = override or host.image
    if not image:
        raise ConfigError("a volcano host needs `image:` (or tcl submit --volcano-image)")
    return image


def _namespace(host: VolcanoHost, run: VolcanoRun) -> str:
    return run.namespace or host.namespace


def helper_pod_manifest(
    host: VolcanoHost, name: str, image: str | None = None, namespace: str | None = None
) -> dict[str, Any]:
    """The short-lived pod that holds the PVC while tcl writes the code tarball into it."""
    pod = k8s.Pod(
        metadata=k8s.ObjectMeta(
            name=name, namespace=namespace or host.namespace, labels={LABEL_HELPER: "code"}
        ),
        spec=k8s.PodSpec(
            containers=[
                k8s.Container(
                    name="helper",
                    image=_image(host, image),
                    command=["sleep", str(HELPER_SLEEP_S)],
                    volume_mounts=[k8s.VolumeMount(name="work", mount_path=host.pvc_mount_path)],
                )
            ],
            restart_policy="Never",
            volumes=[
                k8s.Volume(
                    name="work", persistent_volume_claim=k8s.PvcSource(claim_name=host.pvc_name)
                )
            ],
            node_selector=dict(host.node_selector) or None,
            tolerations=[
                k8s.Toleration(**t.model_dump(exclude_none=True)) for t in host.tolerations
            ]
            or None,
            service_account_name=host.service_account,
        ),
    )
    return pod.dump()


def spec_secret_manifest(
    name: str, namespace: str, spec_json: bytes, labels: Mapping[str, str]
) -> dict[str, Any]:
    """The Secret mounted at /etc/tcl: the run's spec file (it holds the runner's token)."""
    secret = k8s.Secret(
        metadata=k8s.ObjectMeta(name=name, namespace=namespace, labels=dict(labels)),
        data={SPEC_KEY: base64.b64encode(spec_json).decode()},
    )
    return secret.dump()


def render_yaml(manifest: Mapping[str, Any]) -> str:
    """The manifest as YAML for ``tcl submit --dry-run`` (keys in the order tcl wrote them)."""
    return yaml.safe_dump(dict(manifest), sort_keys=False, default_flow_style=False)
