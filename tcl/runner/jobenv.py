"""The job's environment, its argv, and the shell snippet that gives ``ssh`` sessions the same
working dir and environment (secrets excepted: they never reach a file)."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from tcl.atomic import write_atomic
from tcl.runner.api import JobSpec
from tcl.runner.errors import InvalidSpec

# Variables of the runner itself that the job must not inherit.
_RUNNER_ONLY = (
    "TCL_SSH_AUTHORIZED_KEYS",
    "TCL_RUNNER_SSH_ENV_FILE",
    "TCL_RUNNER_CODE_CACHE",
    "TCL_RUNNER_PREMOUNTED_CODE",
    "TCL_RUNNER_TOKEN_FILE",
)


def public_env(spec: JobSpec, workdir: Path) -> dict[str, str]:
    """What tcl adds to the job's environment, secrets excluded."""
    env = {
        "PYTHONUNBUFFERED": "1",
        "TCL_RUN_ID": spec.run_id,
        "TCL_ATTEMPT": str(spec.attempt),
        "TCL_WORKING_DIR": str(workdir),
        "TCL_NODE_RANK": str(spec.cluster.node_rank),
        "TCL_NODES": str(spec.cluster.nodes),
    }
    if spec.cluster.coordinator:
        env["TCL_COORDINATOR"] = spec.cluster.coordinator
    env.update(spec.env)
    return env


def job_env(spec: JobSpec, workdir: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The process environment: the runner's own, tcl's variables, the spec's env, the secrets."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k not in _RUNNER_ONLY}
    env.update(public_env(spec, workdir))
    env.update(spec.secrets)
    return env


def job_out_dir(spec: JobSpec, workdir: Path) -> Path:
    """Where a ``tcl.jobs`` job keeps checkpoints, status, logs and results: ``$TCL_OUT_DIR``
    from the spec's env (a persistent mount, so a retry resumes), else ``<workdir>/out``."""
    return Path(spec.env.get("TCL_OUT_DIR") or workdir / "out")


def job_argv(spec: JobSpec, workdir: Path, config_file: Path) -> list[str]:
    """``argv`` as given, or ``python -m tcl.jobs.launch KEY CONFIG OUT_DIR --run-id ...`` for a
    ``tcl.jobs`` job; its config travels as a file (data), never pasted into a command."""
    if spec.argv is not None:
        return list(spec.argv)
    job = spec.job
    if job is None:  # ``Runner.submit`` refuses such a spec first
        raise InvalidSpec("argv", "neither argv nor job is given: nothing to run")
    argv = [
        sys.executable,
        "-m",
        "tcl.jobs.launch",
        job.key,
        str(config_file) if job.config_yaml else "-",
        str(job_out_dir(spec, workdir)),
        "--run-id",
        spec.run_id,
    ]
    for flag, value in (
        ("--name", spec.name),
        ("--project", spec.project),
        ("--group", spec.group),
        ("--restore", job.restore),
    ):
        if value:
            argv += [flag, value]
    return argv


def ssh_snippet(spec: JobSpec, workdir: Path) -> str:
    """A POSIX shell snippet: ``cd`` to the working dir and export the job's public env."""
    lines = [
        "# Written by tcl-runner when the job started: the job's working dir and environment",
        "# (its secrets are never written anywhere).",
    ]
    secret_names = set(spec.secrets)
    for key, value in sorted(public_env(spec, workdir).items()):
        if key in secret_names or not key.isidentifier():
            continue
        lines.append(f"export {key}={shlex.quote(value)}")
    lines.append(f"cd {shlex.quote(str(workdir))} 2>/dev/null || true")
    return "\n".join(lines) + "\n"


def write_ssh_snippet(path: Path, spec: JobSpec, workdir: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, ssh_snippet(spec, workdir).encode(), mode=0o644)
