"""The shim's wire schema (pydantic). The shim owns it; control imports it with the client."""

from __future__ import annotations

import enum
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
)

API_VERSION = 1


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


class NetworkMode(enum.StrEnum):
    AUTO = "auto"
    HOST = "host"
    BRIDGE = "bridge"


class ExecutorKind(enum.StrEnum):
    DOCKER = "docker"
    PROCESS = "process"


NonNegInt = Annotated[int, Field(ge=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RegistryAuth(_Strict):
    username: str
    password: str = Field(repr=False)


class Mount(_Strict):
    source: str
    target: str
    read_only: bool = False


class TaskSpec(_Strict):
    id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.-]+$")
    name: str = ""
    image: str = ""  # docker executor only
    registry_auth: RegistryAuth | None = None
    executor: ExecutorKind | None = None  # None: the shim's default
    # A count, "all", or explicit indices.
    accelerators: NonNegInt | Literal["all"] | list[NonNegInt] = 0
    cpus: float | None = Field(default=None, gt=0)
    memory_bytes: int | None = Field(default=None, gt=0)
    shm_bytes: int | None = Field(default=None, gt=0)
    network: NetworkMode = NetworkMode.AUTO
    multinode: bool = False
    mounts: list[Mount] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    ssh_keys: list[str] = Field(default_factory=list)  # public keys for the container sshd
    # The code the runner will be given. Docker executor: when the host's code cache holds that
    # tree, the runner's working dir is an overlay on it (no copy); otherwise ignored.
    code_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")

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
                'a count >= 0, "all", or a list of accelerator indices >= 0') from None


class Ports(BaseModel):
    runner: int | None = None
    ssh: int | None = None


class TaskInfo(BaseModel):
    id: str
    name: str
    status: TaskStatus
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
    message: str = ""
    timeout_s: float = Field(default=10.0, ge=0)


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


class HealthInfo(BaseModel):
    service: Literal["tcl-shim"] = "tcl-shim"
    version: str
    api_version: int = API_VERSION


class ErrorBody(BaseModel):
    error: str  # "no_capacity", "task_exists", "not_found", ...
    detail: str | list[dict[str, object]]
    free: list[int] | None = None  # no_capacity only: the accelerator indices free right now
