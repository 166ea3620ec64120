"""The workstation config (``~/.config/tcl/config.yaml``): schema, loading, error lines.

The schema follows seed 000 (clusters with root/work/log; hosts of type local, ssh (alias
``plain``), slurm, tpu, volcano; ``priority``; ``gres_mapping``). Every model forbids unknown
keys, so a typo is an error. Errors name the key path and the line in the file: the YAML is
composed once more into nodes that keep their marks, and each pydantic error location is walked
through that node tree.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from tcl.control import yamlsafe
from tcl.control.clusterfs import check_all_squash, check_cache_size, check_meta_url
from tcl.control.configerrors import (
    RefError,
    line_of,
    message,
    path_of,
    reference_errors,
    user_loc,
)
from tcl.control.errors import ConfigError
from tcl.control.paths import config_path
from tcl.control.safefields import (
    ConfigPath,
    FakeAccelerators,
    HostName,
    NoControl,
    PlainPath,
    ShimPath,
    SshHops,
    SshWord,
)
from tcl.runner.api import GroupName as UvGroup

LOCAL_HOST_NAME = "local"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClusterConfig(_Model):
    """Filesystem layout shared by the hosts of one cluster."""

    root: str = ""  # shared filesystem root (checkpoints, data)
    work: str = ""  # per-job scratch space
    log: str = ""  # log files
    # optional JuiceFS, mounted at ``root`` on every host of the cluster (tcl.control.clusterfs)
    mount: Annotated[str | None, AfterValidator(check_meta_url)] = None  # metadata engine URL
    cache_size: Annotated[str | None, AfterValidator(check_cache_size)] = None  # 100G; MiB bare
    cache_dir: str | None = None
    all_squash: Annotated[str | None, AfterValidator(check_all_squash)] = None  # UID:GID
    # a host's shim unmounts it this long after its last task there ended (null: never)
    unmount_after_idle_s: float | None = Field(default=300.0, ge=0)

    @model_validator(mode="after")
    def _mount_needs_root(self) -> ClusterConfig:
        if self.mount is not None and not self.root.startswith("/"):
            raise RefError(("root",), "an absolute path: `mount:` mounts the volume there")
        if self.cache_dir is not None and not self.cache_dir.startswith("/"):
            raise RefError(("cache_dir",), "an absolute path")
        return self


ChipName = Annotated[str, AfterValidator(str.lower)]


class _HostBase(_Model):
    cluster: str | None = None
    # chip name (lower case, as hosts report it: H100 is h100) -> count per node
    chips: dict[ChipName, int] = Field(default_factory=dict)
    image: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    # dependency groups of the job's uv project synced on this host (``uv sync --group``),
    # before the submit's own ``--group``s
    uv_groups: list[UvGroup] = Field(default_factory=list)


class LocalHost(_HostBase):
    """This machine, through an embedded shim (no SSH)."""

    type: Literal["local"]
    executor: Literal["process", "docker"] = "process"
    # Fake accelerators for the embedded shim, e.g. "h100:2" (tests and demos).
    fake_accelerators: FakeAccelerators | None = None


class SshOptions(_HostBase):
    """How a host is reached over SSH (``ssh`` and ``slurm`` hosts take the same keys)."""

    # these reach ssh's argv and the ssh config `tcl ssh` writes (tcl.control.safefields)
    ssh: SshWord  # an alias from ~/.ssh/config, or a hostname
    port: int | None = Field(default=None, ge=1, le=65535)
    user: SshWord | None = None
    proxy_jump: SshHops | None = None  # "a,b" like ssh -J
    identity_file: ConfigPath | None = None
    known_hosts: ConfigPath | None = None
    ssh_config_file: ConfigPath | None = None  # read instead of ~/.ssh/config
    connect_timeout_s: float = Field(default=10.0, gt=0)
    keepalive_s: float = Field(default=15.0, gt=0)
    max_sessions: int = Field(default=4, ge=1)  # concurrent SSH channels to this host


class SshHost(SshOptions):
    """A plain host over SSH with a shim installed by ``tcl host setup``."""

    type: Literal["ssh", "plain"]
    shim_port: int = Field(default=10998, ge=1, le=65535)
    # venv, token, state on the host (~ resolved there); it goes into the shim's systemd unit
    shim_dir: ShimPath = "~/.local/share/tcl-shim"
    executor: Literal["docker", "process"] = "docker"
    python: NoControl = "python3"  # used by `tcl host setup` to make the venv
    # An existing venv on the host that already has tcl installed (a shared filesystem, an
    # offline host): `tcl host setup` uses it instead of making <shim_dir>/venv.
    shim_venv: PlainPath | None = None
    # What `tcl host setup` pip-installs into a new venv (a wheel it uploads when empty).
    shim_package: NoControl | None = None
    fake_accelerators: FakeAccelerators | None = None  # passed to the shim by `tcl host setup`


class SlurmPartition(_Model):
    name: str
    default: bool = False


DEFAULT_RUN_DIR_RETENTION_S = 7 * 86400.0


class SlurmHost(SshOptions):
    """A SLURM cluster reached over SSH to its login node (``ssh``: the login node).

    Runs live under ``clusters.<cluster>.work`` on the shared filesystem: the code tarballs,
    tcl's runner venv (one per tcl version) and each run's spec, script and event logs."""

    type: Literal["slurm"]
    partitions: list[SlurmPartition] = Field(default_factory=list)  # empty: every partition
    account: str | None = None
    qos: str | None = None
    mem: str | None = None  # sbatch --mem, e.g. "64G"
    exclude: list[str] = Field(default_factory=list)  # node names never used
    # --time when the job gives no max duration (SLURM's partition default when None)
    time_limit_s: int | None = Field(default=None, gt=0)
    signal_before_s: int = Field(default=120, ge=0)  # --signal=USR1@N (checkpoint request)
    # none: tcl-runner runs on the node itself; otherwise it runs inside container_image
    # (charliecloud: an image directory for ch-run; pyxis, apptainer: untested here)
    container: Literal["none", "charliecloud", "pyxis", "apptainer"] = "none"
    container_image: str | None = None
    python: str = "python3"  # on the login node and nodes: makes the runner venv
    # What the runner venv pip-installs (default: a wheel of this tcl, uploaded once).
    tcl_package: str | None = None
    # An existing venv on the shared filesystem with tcl installed: used instead of making one.
    # With a container neither is used: the runner is the image's /opt/tcl/bin/tcl-runner.
    runner_venv: str | None = None
    # A run's dir on the cluster (spec, script, event logs: all kept on the workstation by
    # then) is removed this long after the run ended (0: at once)
    run_dir_retention_s: float = Field(default=DEFAULT_RUN_DIR_RETENTION_S, ge=0)

    @model_validator(mode="after")
    def _check_container(self) -> SlurmHost:
        if self.container != "none" and not self.container_image:
            raise ValueError(f"container {self.container} needs container_image")
        return self


def _known_accelerator_type(text: str) -> str:
    from tcl.control.backends.tpu.accelerators import parse_accelerator_type

    try:
        return parse_accelerator_type(text).accelerator_type
    except ConfigError as e:
        raise ValueError(str(e)) from None


class TpuHost(_HostBase):
    """A Google Cloud TPU VM slice (a pod of workers), created on demand through the Cloud TPU
    API v2. tcl reaches each worker over SSH at its network endpoint; the node's
    ``startup-script`` installs a shim on every worker at first boot."""

    type: Literal["tpu"]
    zone: str
    project: str | None = None  # default: the project of the Application Default Credentials
    accelerator_type: Annotated[str, AfterValidator(_known_accelerator_type)]
    version: str  # runtimeVersion, e.g. tpu-ubuntu2204-base
    spot: bool = False
    preemptible: bool = False
    network: str | None = None
    subnetwork: str | None = None
    service_account: str | None = None
    internal_ip: bool = False  # reach workers at their internal address (a VPN, a bastion)
    metadata: dict[str, str] = Field(default_factory=dict)  # a startup-script here is kept
    node_id: str | None = None  # the TPU node's name (default: tcl-<host name>)
    queued_resource: bool = False  # ask for capacity through queuedResources
    labels: dict[str, str] = Field(default_factory=dict)
    # Cloud TPU API endpoint (default Google's; TCL_TPU_API_ENDPOINT overrides) and credentials:
    # "adc" (Application Default Credentials) or "anonymous" (an emulator; TCL_TPU_CREDENTIALS)
    api_endpoint: str | None = None
    credentials: Literal["adc", "anonymous"] = "adc"
    # SSH to the workers (the user whose key the node's ssh-keys metadata carries)
    ssh_user: SshWord | None = None
    ssh_port: int = Field(default=22, ge=1, le=65535)
    identity_file: ConfigPath | None = None
    known_hosts: ConfigPath | None = None
    connect_timeout_s: float = Field(default=10.0, gt=0)
    # The shim on each worker, installed by the startup-script
    shim_port: int = Field(default=10998, ge=1, le=65535)
    shim_dir: str = "/var/lib/tcl-shim"
    shim_venv: str | None = None  # an existing venv with tcl (a custom image)
    shim_package: str | None = None  # what pip installs (default: this tcl from PyPI)
    python: str = "python3"
    executor: Literal["process", "docker"] = "process"
    fake_accelerators: str | None = None  # tests: CPU workers pretending to hold TPU chips
    boot_timeout_s: float = Field(default=900.0, gt=0)  # create → every worker's shim answers
    # delete the node once no run has used it for this long (None: never; the daemon does it,
    # tcl.control.lifecycle.idlehosts; `tcl hosts` shows the countdown)
    idle_timeout_s: float | None = Field(default=None, gt=0)


class Toleration(_Model):
    key: str | None = None
    operator: Literal["Exists", "Equal"] | None = None
    value: str | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(default=None, ge=0)  # NoExecute only


class VolcanoHost(_HostBase):
    """A Kubernetes cluster with Volcano: a run is one Volcano Job (``vcjob``) of ``num_nodes``
    pods (:mod:`tcl.control.backends.volcano.manifest`); code and state live on a PVC."""

    type: Literal["volcano"]
    namespace: str = "default"  # --volcano-namespace overrides
    queue: str | None = None  # Volcano queue (null: Volcano's "default")
    pvc_name: str
    pvc_mount_path: str = "/workspace"
    num_nodes: int = Field(default=1, ge=1)
    gpus_per_node: int | None = Field(default=None, ge=0)
    gpu_resource_key: str = "nvidia.com/gpu"
    cpu: str | None = None  # a Kubernetes quantity per pod, e.g. "32"
    memory: str | None = None  # a Kubernetes quantity per pod, e.g. 256Gi
    shm_size: str | None = None  # /dev/shm (a memory-backed emptyDir) size limit, e.g. 64Gi
    priority_class: str | None = None
    kubeconfig: str | None = None
    context: str | None = None
    rdma: bool = False
    rdma_per_node: int | None = Field(default=None, ge=1)  # with rdma; null: 1
    # the RDMA device plugin's resource name (NVIDIA Network Operator's shared device plugin)
    rdma_resource_key: str = "rdma/rdma_shared_device_a"
    node_selector: dict[str, str] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list)
    service_account: str | None = None
    max_retry: int = Field(default=3, ge=0)  # Volcano's maxRetry: restarts of the whole job
    ssh: bool = False  # Volcano's ssh plugin: pod-to-pod SSH keys
    check_availability: bool = True  # the solver asks the queue for free GPUs
    runner_port: int = Field(default=10990, ge=1, le=65535)  # each pod's runner API


HostConfig = Annotated[
    LocalHost | SshHost | SlurmHost | TpuHost | VolcanoHost, Field(discriminator="type")
]


class ShippingConfig(_Model):
    max_bytes: int = Field(default=512 * 1024 * 1024, gt=0)  # uncompressed snapshot size
    # Budget of the local tarball cache (<state>/code): least recently used tarballs beyond it
    # are removed after each snapshot (never the one being shipped).
    cache_max_bytes: int = Field(default=2 * 1024**3, gt=0)


class Config(_Model):
    clusters: dict[str, ClusterConfig] = Field(default_factory=dict)
    hosts: dict[HostName, HostConfig] = Field(default_factory=dict)
    priority: list[str] = Field(default_factory=list)
    # clusters whose hosts are tried first (in ``priority`` order among them), and clusters
    # never used unless a submit asks for them (``--cluster``)
    prefer: list[str] = Field(default_factory=list)
    avoid: list[str] = Field(default_factory=list)
    gres_mapping: dict[str, str] = Field(default_factory=dict)
    shipping: ShippingConfig = Field(default_factory=ShippingConfig)

    @model_validator(mode="after")
    def _check_references(self) -> Config:
        # a config built in code; a file's are all reported at once by parse_config
        refs = {"clusters", "hosts", "priority", "prefer", "avoid"}
        bad = reference_errors(self.model_dump(include=refs))
        if bad:
            raise RefError(*bad[0])
        return self

    def ordered_hosts(self) -> list[str]:
        """Host names in solver order: ``priority`` first, then the rest in file order; hosts
        of a ``prefer``red cluster before the others (that order kept among them)."""
        rest = [h for h in self.hosts if h not in self.priority]
        order = [*self.priority, *rest]
        first = [h for h in order if self.hosts[h].cluster in self.prefer]
        return [*first, *(h for h in order if h not in first)]


def default_config() -> Config:
    """What a user without a config file gets: one ``local`` host."""
    return Config(hosts={LOCAL_HOST_NAME: LocalHost(type="local")})


def load_config(explicit: str | os.PathLike[str] | None = None) -> Config:
    """Load and validate the config; no file at the default path → :func:`default_config`."""
    return load_config_at(*config_path(explicit))


def load_config_at(path: Path, named: bool) -> Config:
    """Load the config at ``path``; a missing file is an error only when the user ``named`` it."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        if named:
            raise ConfigError(f"{path}: config file not found") from None
        return default_config()
    except OSError as e:
        raise ConfigError(f"{path}: cannot read config: {e.strerror}") from None
    return parse_config(text, str(path))


def parse_config(text: str, source: str = "<config>") -> Config:
    """Validate YAML text; every error names ``source:line: key.path: message``."""
    try:
        root = yamlsafe.compose(text)  # aliases bounded (tcl.control.yamlsafe)
        data = yamlsafe.construct(root)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise ConfigError(f"{source}:{line}: invalid YAML: {e.problem or e}") from None
    if data is None:
        return default_config()
    if not isinstance(data, dict):
        raise ConfigError(f"{source}:1: the config must be a mapping of keys to values")
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        found: list[tuple[int, str]] = []
        for err in e.errors():
            if isinstance(err.get("ctx", {}).get("error"), RefError):
                continue  # the first of the references: all of them are added below
            loc = user_loc(tuple(err["loc"]), err["type"])
            # an unknown host type points at its `type:` line
            line = line_of(root, (*loc, "type") if err["type"].startswith("union_tag") else loc)
            found.append((line, f"{path_of(loc)}: {message(err)}"))
        # References are checked on the file's own values, so a bad one shows beside the
        # other errors (the model's check runs only once every field is valid).
        for loc, msg in reference_errors(data):
            found.append((line_of(root, loc), f"{path_of(loc)}: {msg}"))
        found.sort(key=lambda f: f[0])
        raise ConfigError("\n".join(f"{source}:{line}: {text}" for line, text in found)) from None
