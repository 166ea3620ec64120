"""The tcl.jobs exception tree.

JobsError
├── ConfigError          a config key, value or class declaration is wrong
├── RegistryError        a job key is unknown or registered twice
│   └── JobModuleError   a module declared to hold jobs could not be imported (traceback kept)
├── CheckpointError      a checkpoint is missing, incomplete or would be clobbered
├── BatchSizeError       the auto batch-size search could not finish
├── DistributedError     a multi-node job's environment is missing or wrong, or JAX cannot join
└── JobPreempted         the job stopped on SIGTERM/SIGINT (after checkpointing, if it can)
"""

from __future__ import annotations


class JobsError(Exception):
    """Base of every error raised by tcl.jobs."""


class ConfigError(JobsError):
    """A config key, value or declaration is wrong; the message names the key."""

    def __init__(self, message: str, *, key: str | None = None, line: int | None = None) -> None:
        where = ""
        if key is not None:
            where = f"{key}: " if line is None else f"{key} (line {line}): "
        super().__init__(where + message)
        self.key = key
        self.line = line


class RegistryError(JobsError):
    """A job key is unknown or registered twice."""


class JobModuleError(RegistryError):
    """A module a project declares to hold jobs (``[tool.tcl] jobs``, or an entry point in the
    ``tcl.jobs`` group) failed to import; the message carries its traceback."""

    def __init__(self, module: str, source: str, details: str) -> None:
        super().__init__(f"cannot import job module {module!r} (declared in {source}):\n{details}")
        self.module = module
        self.source = source


class CheckpointError(JobsError):
    """A checkpoint is missing, incomplete, or a save would clobber the `latest` one."""


class BatchSizeError(JobsError):
    """The auto batch-size search failed for a reason other than running out of memory."""


class DistributedError(JobsError):
    """A multi-node job cannot start its JAX distributed runtime: a variable of its environment
    (``TCL_NODES``, ``TCL_NODE_RANK``, ``TCL_COORDINATOR``...) is missing or invalid, named in
    the message, or JAX refused to join."""


class JobPreempted(JobsError):
    """Raised inside a job that was asked to stop; `checkpoint` is what it saved, if anything."""

    def __init__(self, checkpoint: str | None = None) -> None:
        super().__init__(f"preempted (checkpoint: {checkpoint or 'none'})")
        self.checkpoint = checkpoint
