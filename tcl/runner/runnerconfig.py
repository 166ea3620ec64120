"""What a runner is started with (``tcl-runner serve`` and ``batch`` flags, an embedded one's)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tcl.runner import code as codemod
from tcl.runner.limits import DEFAULT_GRACE_S


@dataclass(frozen=True)
class RunnerConfig:
    state_dir: Path
    max_code_bytes: int = codemod.DEFAULT_MAX_CODE_BYTES
    max_unpacked_bytes: int = codemod.DEFAULT_MAX_UNPACKED_BYTES
    max_members: int = codemod.DEFAULT_MAX_MEMBERS  # in the code tarball
    # Where ssh sessions find the job's working dir and env (None: not written).
    ssh_env_file: Path | None = None
    # A content-addressed cache of extracted trees shared by the host's runners (None: none).
    code_cache_dir: Path | None = None
    # JAX's persistent compilation cache of the host's jobs (None: JAX's default, none): a
    # later attempt of a run (a retry, a requeue after preemption) skips its recompiles.
    compile_cache_dir: Path | None = None
    # Where the host keeps the jobs' project environments (``tcl.runner.projectenv``; None:
    # each job's runner builds its own, under its state dir).
    project_env_dir: Path | None = None
    # The sha256 of the tree the executor already mounted (an overlay) as the default working
    # dir: installing that code is then a no-op.
    premounted_code: str | None = None
    # End every descendant the job leaves behind (tcl.runner.reaper). Only for a runner that is
    # a process of its own (serve, batch), never one embedded in another program.
    end_orphans: bool = False
    # How long a job may take to exit after the runner forwards it a stop signal, and after
    # its max_duration_s, before SIGKILL (``--stop-grace-s``).
    stop_grace_s: float = DEFAULT_GRACE_S
    # Each event also goes to this fd (batch ``--echo-events``: stdout, which a Kubernetes pod's
    # log keeps after its runner is gone; ``tcl.runner.api.echoed_events`` reads it back).
    echo_events_fd: int | None = None
