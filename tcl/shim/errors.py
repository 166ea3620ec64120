"""The shim's exception tree. Foreign errors (docker, httpx, OSError) are translated where called.

::

    ShimError                      anything the shim reports (500 unless a subclass says otherwise)
    ├── BadRequest                 the request is well-formed JSON but cannot be served (422)
    │   └── ExecutorUnavailable    the asked-for executor does not exist on this host
    ├── Unauthorized               missing or wrong bearer token (401)
    ├── NotFound                   no task with that id, or no such route (404)
    ├── MethodNotAllowed           the route exists but not with that method (405)
    ├── PayloadTooLarge            the request body is over the shim's limit (413)
    ├── Conflict                   the request clashes with the current state (409)
    │   ├── TaskExists             a task with that id is already known
    │   ├── NoCapacity             the accelerators asked for are not free (carries what is free)
    │   ├── TaskNotTerminated      delete of a task that has not terminated
    │   └── IllegalTransition      a status move the transition table refuses
    ├── ExecutorError              the container or process could not be run
    │   ├── ImageError             the image cannot be found or pulled
    │   ├── ContainerError         the container/process failed to be created or started
    │   └── MountFailed            the cluster's filesystem could not be mounted on this host (424)
    ├── ShimUnavailable            (client) the shim cannot be reached
    └── ProtocolError              (client) the shim answered something unexpected
"""

from __future__ import annotations


class ShimError(Exception):
    """Base of every error the shim (or its client) raises on purpose."""

    code = "internal"

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class BadRequest(ShimError):
    code = "bad_request"


class ExecutorUnavailable(BadRequest):
    code = "executor_unavailable"


class Unauthorized(ShimError):
    code = "unauthorized"


class NotFound(ShimError):
    code = "not_found"


class MethodNotAllowed(ShimError):
    code = "method_not_allowed"


class PayloadTooLarge(ShimError):
    code = "payload_too_large"


class Conflict(ShimError):
    code = "conflict"


class TaskExists(Conflict):
    code = "task_exists"


class NoCapacity(Conflict):
    """Raised synchronously at submit; ``free`` lists the accelerator indices free right now."""

    code = "no_capacity"

    def __init__(self, detail: str, free: list[int] | None = None) -> None:
        super().__init__(detail)
        self.free: list[int] = list(free or [])


class TaskNotTerminated(Conflict):
    code = "task_not_terminated"


class IllegalTransition(Conflict):
    code = "illegal_transition"


class ExecutorError(ShimError):
    code = "executor_error"


class ImageError(ExecutorError):
    code = "image_error"


class ContainerError(ExecutorError):
    code = "container_error"


class MountFailed(ExecutorError):
    code = "mount_failed"


class ShimUnavailable(ShimError):
    code = "unavailable"


class ProtocolError(ShimError):
    code = "protocol_error"


ALL_ERRORS: tuple[type[ShimError], ...] = (
    ShimError,
    BadRequest,
    ExecutorUnavailable,
    Unauthorized,
    NotFound,
    MethodNotAllowed,
    PayloadTooLarge,
    Conflict,
    TaskExists,
    NoCapacity,
    TaskNotTerminated,
    IllegalTransition,
    ExecutorError,
    ImageError,
    ContainerError,
    MountFailed,
    ShimUnavailable,
    ProtocolError,
)
BY_CODE: dict[str, type[ShimError]] = {cls.code: cls for cls in ALL_ERRORS}
