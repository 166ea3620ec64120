"""The shim's wire schema (pydantic). The shim owns it; control imports it with the client."""

from __future__ import annotations

import enum
import re
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from tcl.common.api import MAX_SECRET_LEN, AbsPath

# A SLURM node's runner reads it too (its batch spec file): defined in tcl.common, part of this
# schema all the same.
from tcl.common.api import ClusterFs as ClusterFs

API_VERSION = 1

# Task ids name a folder (tasks/<id>) and a container: no leading dot (so never "." or ".."),
# no leading dash (never an option), no separators. Checked in TaskSpec, in every {task_id}
# path parameter, and again by TaskStore.task_dir before a path is built.
TASK_ID_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
TASK_ID_MAX_LEN = 128
# In a process-executor task's dir (``<state-dir>/tasks/<id>/``): what its runner writes when the
# job starts, the job's working dir and environment (never its secrets), for a shell on the host
# (`tcl ssh` on the local default sources it).
SHELL_ENV_FILE = "shell-env.sh"
_TASK_ID_RE = re.compile(TASK_ID_PATTERN)

# Size bounds on what a client may ask the shim to keep (in memory, in task.json, in the
# container's environment). The whole request body is capped separately (tcl.shim.app).
MAX_ENV_VARS = 256
MAX_ENV_KEY_LEN = 256
MAX_ENV_VALUE_LEN = 32 * 1024
MAX_SSH_KEYS = 32
MAX_SSH_KEY_LEN = 16 * 1024
MAX_MOUNTS = 64
MAX_NAME_LEN = 512  # name, image, registry username
MAX_MESSAGE_LEN = 4096
MAX_ACCELERATORS = 4096  # a count, an index, or the length of a list of indices
MAX_CPUS = 65536.0
MAX_STOP_TIMEOUT_S = 3600.0
MAX_START_WAIT_S = 10.0  # GET /api/tasks/{id}?wait_s=: the longest a start is waited for


def valid_task_id(task_id: str) -> bool:
    return len(task_id) <= TASK_ID_MAX_LEN and _TASK_ID_RE.fullmatch(task_id) is not None


class TaskStatus(enum.StrEnum):
    """Task lifecycle; the legal moves live in ``tcl.shim.states``."""

    PENDING = "pending"
    PREPARING = "preparing"
    PULLING = "pulling"
    CREATING = "creating"
    RUNNING = "running"
    TERMINATED = "terminated"


class TerminationReason(enum.StrEnum):
    DONE = "done"
    FAILED = "failed"
    NO_CAPACITY = "no_capacity"
    IMAGE_ERROR = "image_error"
    CONTAINER_ERROR = "container_error"
    STOPPED_BY_USER = "stopped_by_user"
    MAX_DURATION = "max_duration"
    VANISHED = "vanished"  # gone while the shim was down
    PREEMPTED = "preempted"  # the host is going away (a spot VM's preemption, a stop)
    # ended before its job started: a placement undone, its runner stopped before `run`.
    # Whoever adopts the placement later knows nothing of it ran (place it again)
    NOT_STARTED = "not_started"


class NetworkMode(enum.StrEnum):
    AUTO = "auto"
    HOST = "host"
    BRIDGE = "bridge"


class ExecutorKind(enum.StrEnum):
    DOCKER = "docker"
    PROCESS = "process"


# Numbers are strict: JSON true/false are not numbers (lax pydantic reads true as 1), nor is
# "1"; a StrictFloat still takes a JSON integer. Each is bounded, and floats refuse Infinity
# and NaN (Python's json module reads both): docker takes int64, asyncio takes finite timeouts.
def _whole_number(value: object) -> object:
    # JSON Schema's "integer" includes 2.0; strict int alone would refuse it.
    return int(value) if isinstance(value, float) and value.is_integer() else value


# The bounds come before the validator: after it, pydantic writes them into the JSON schema as
# "gt"/"le" instead of "exclusiveMinimum"/"maximum".
_whole = BeforeValidator(_whole_number)
NonNegInt = Annotated[StrictInt, Field(ge=0, le=MAX_ACCELERATORS), _whole]
AcceleratorIndices = Annotated[list[NonNegInt], Field(max_length=MAX_ACCELERATORS)]
ByteCount = Annotated[StrictInt, Field(gt=0, le=2**53), _whole]  # 8 PiB; exact as a double
TaskId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=TASK_ID_MAX_LEN, pattern=TASK_ID_PATTERN),
]
Name = Annotated[str, StringConstraints(max_length=MAX_NAME_LEN)]
# No "=" in a key and no NUL anywhere: neither can be put in a process environment.
EnvKey = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_ENV_KEY_LEN, pattern=r"^[^=\x00]+$")
]
EnvValue = Annotated[str, StringConstraints(max_length=MAX_ENV_VALUE_LEN, pattern=r"^[^\x00]*$")]
SshKey = Annotated[str, StringConstraints(max_length=MAX_SSH_KEY_LEN)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RegistryAuth(_Strict):
    username: Name
    password: str = Field(repr=False, max_length=MAX_SECRET_LEN)


class Mount(_Strict):
    source: AbsPath
    target: AbsPath
    read_only: StrictBool = False


class TaskSpec(_Strict):
    id: TaskId
    name: Name = ""
    image: Name = ""  # docker executor only
    registry_auth: RegistryAuth | None = None
    executor: ExecutorKind | None = None  # None: the shim's default
    # A count, "all", or explicit indices.
    accelerators: NonNegInt | Literal["all"] | AcceleratorIndices = 0
    cpus: StrictFloat | None = Field(default=None, gt=0, le=MAX_CPUS, allow_inf_nan=False)
    memory_bytes: ByteCount | None = None
    shm_bytes: ByteCount | None = None
    network: NetworkMode = NetworkMode.AUTO
    multinode: StrictBool = False
    mounts: list[Mount] = Field(default_factory=list, max_length=MAX_MOUNTS)
    env: dict[EnvKey, EnvValue] = Field(default_factory=dict, max_length=MAX_ENV_VARS)
    # Public keys for the container sshd.
    ssh_keys: list[SshKey] = Field(default_factory=list, max_length=MAX_SSH_KEYS)
    # The code the runner will be given. Docker executor: when the host's code cache holds that
    # tree, the runner's working dir is an overlay on it (no copy); otherwise ignored.
    code_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    # The cluster's filesystem, mounted before the task starts (docker: also bound into it).
    cluster_fs: ClusterFs | None = None

    @field_validator("accelerators", mode="wrap")
    @classmethod
    def _one_accelerators_error(
        cls, value: object, handler: ValidatorFunctionWrapHandler
    ) -> object:
        # One clear error instead of one per union member ("accelerators.literal['all']"...).
        try:
            return handler(value)
        except ValidationError:
            raise ValueError(
                f'a count >= 0, "all", or a list of accelerator indices >= 0 (integers up to '
                f"{MAX_ACCELERATORS})"
            ) from None


class Ports(BaseModel):
    runner: int | None = None
    ssh: int | None = None


class TaskInfo(BaseModel):
    id: str
    name: str
    status: TaskStatus
    # Set by a terminate as it begins (the task still running while its job stops), so a client
    # that sees the job's last event can tell a preemption from a user's stop.
    termination_reason: TerminationReason | None = None
    message: str = ""
    exit_code: int | None = None
    accelerators: list[int] = Field(default_factory=list)
    network: NetworkMode
    ports: Ports = Field(default_factory=Ports)
    image: str = ""
    executor: ExecutorKind
    pull_progress: float | None = None  # 0..1 while pulling
    # The bearer token of this task's runner (made by the shim, handed to the runner in a 0600
    # file, never on a command line); only the shim's authenticated callers ever see it.
    runner_token: str | None = Field(default=None, repr=False)
    created_at: float
    updated_at: float


class TerminateRequest(_Strict):
    reason: TerminationReason = TerminationReason.STOPPED_BY_USER
    message: str = Field(default="", max_length=MAX_MESSAGE_LEN)
    timeout_s: StrictFloat = Field(default=10.0, ge=0, le=MAX_STOP_TIMEOUT_S, allow_inf_nan=False)


class PreemptionNotice(_Strict):
    """``POST /api/preemption``: the host is going away; each running job gets ``grace_s`` to
    checkpoint after its SIGTERM (GCE gives a shutdown-script about 30 s in all)."""

    message: str = Field(default="the host is going away", max_length=MAX_MESSAGE_LEN)
    grace_s: StrictFloat = Field(default=20.0, ge=0, le=MAX_STOP_TIMEOUT_S, allow_inf_nan=False)


class Accelerator(BaseModel):
    index: int
    chip: str  # "h100", "a100", "v4", ...
    vendor: Literal["nvidia", "tpu", "fake"]
    name: str = ""
    uuid: str = ""
    memory_bytes: int = 0
    task_id: str | None = None  # the tcl task holding it
    busy_outside: bool = False  # used by a process outside tcl
    fake: bool = False


class HostInfo(BaseModel):
    hostname: str
    cpus: int
    memory_bytes: int
    accelerators: list[Accelerator]
    executors: list[ExecutorKind]


class MountHealth(BaseModel):
    """One cluster filesystem this shim mounted: whether it answers now, and for how many of
    its live tasks."""

    mount_point: str
    meta_url: str  # without its password
    mounted: bool
    tasks: int = 0
    error: str = ""


class HealthInfo(BaseModel):
    service: Literal["tcl-shim"] = "tcl-shim"
    version: str
    api_version: int = API_VERSION
    mounts: list[MountHealth] = Field(default_factory=list)


class ErrorBody(BaseModel):
    error: str  # "no_capacity", "task_exists", "not_found", ...
    detail: str | list[dict[str, object]]
    free: list[int] | None = None  # no_capacity only: the accelerator indices free right now
