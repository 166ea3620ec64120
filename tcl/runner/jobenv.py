"""The job's environment, its argv, and the shell snippet that gives ``ssh`` sessions the same
working dir and environment (secrets excepted: they never reach a file)."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from tcl.atomic import write_atomic
from tcl.runner import nodeenv
from tcl.runner.api import ClusterInfo, JobSpec, SessionKind
from tcl.runner.cluster import resolve_placement
from tcl.runner.errors import InvalidSpec

# Variables of the runner itself that the job must not inherit.
_RUNNER_ONLY = (
    "TCL_SSH_AUTHORIZED_KEYS",
    "TCL_RUNNER_SSH_ENV_FILE",
    "TCL_RUNNER_CODE_CACHE",
    "TCL_RUNNER_ENV_DIR",
    "TCL_RUNNER_PREMOUNTED_CODE",
    "TCL_RUNNER_TOKEN_FILE",
    "TCL_RUNNER_JOB_TCL_PATH",
)

# Set by the runner image's entrypoint: a directory holding only the ``tcl`` package (none of
# the runner venv's dependencies). In an image the job runs with the image's own python, not
# the runner's venv, so a ``job`` spec gets this directory on its PYTHONPATH to import tcl.jobs;
# JAX and the rest of the job's dependencies must come from the image.
JOB_TCL_PATH_VAR = "TCL_RUNNER_JOB_TCL_PATH"

# What an image sets to choose its interpreter and libraries. sshd starts sessions with a clean
# environment, so the ssh snippet carries these from the job's environment: an ssh session's
# ``python`` is then the job's.
_SESSION_INHERITED = ("PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH")


def compile_cache_env(directory: Path) -> dict[str, str]:
    """JAX's persistent compilation cache in ``directory``; a job's own settings win. JAX keys
    each entry by what invalidates it (the computation, jax/jaxlib version, backend, device
    kind and topology, compile options), so one directory serves every job of a host. No size
    bound is set: JAX's (``JAX_COMPILATION_CACHE_MAX_SIZE``) needs ``filelock`` in the job's
    environment, and without it JAX stops caching at all."""
    return {"JAX_COMPILATION_CACHE_DIR": str(directory)}


def public_env(
    spec: JobSpec, workdir: Path, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """What tcl adds to the job's environment, secrets excluded; the spec's ``env`` wins over
    each of tcl's variables. ``base``: the runner's own environment (default ``os.environ``),
    where the scheduler says which node this is (``tcl.runner.cluster``)."""
    base = os.environ if base is None else base
    placement = resolve_placement(spec, base)
    env = {
        "PYTHONUNBUFFERED": "1",
        "TCL_RUN_ID": spec.run_id,
        nodeenv.ATTEMPT: str(placement.attempt),
        "TCL_WORKING_DIR": str(workdir),
        **placement_env(placement.cluster, base),
    }
    tcl_path = base.get(JOB_TCL_PATH_VAR)
    runs_tcl = spec.job is not None or (
        spec.argv is None and spec.session is not None and spec.session.kind is SessionKind.REMOTE
    )
    if runs_tcl and tcl_path:
        # Only for ``job`` specs and the ``@tcl.remote`` call server: an argv job sees the
        # image's imports and nothing of tcl's.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (tcl_path, base.get("PYTHONPATH")) if p)
    env.update(spec.env)
    return env


def placement_env(cluster: ClusterInfo, base: Mapping[str, str]) -> dict[str, str]:
    """Where the job sits (``TCL_NODES``, ``TCL_NODE_RANK``, ``TCL_COORDINATOR``) and, with more
    than one node, what ``jax.distributed.initialize`` reads itself.

    ``JAX_LOCAL_DEVICE_IDS``: given a coordinator, num_processes and process_id but no device
    ids, JAX still runs its cluster auto-detection, and under SLURM that limits each process to
    the one GPU numbered ``SLURM_LOCALID`` (jax-ml/jax#16788): with one process per node, every
    node would use GPU 0 only. The ids are CUDA's 0..n-1 numbering of the GPUs
    ``CUDA_VISIBLE_DEVICES`` lets through (not their host indices), so they are set only where
    that variable says how many there are; JAX reads them only to restrict its CUDA/ROCm
    devices, so on a CPU or TPU host they change nothing."""
    env = {nodeenv.NODES: str(cluster.nodes), nodeenv.NODE_RANK: str(cluster.node_rank)}
    if cluster.coordinator:
        env[nodeenv.COORDINATOR] = cluster.coordinator
    if cluster.nodes > 1:
        if cluster.coordinator:
            env[nodeenv.JAX_COORDINATOR_ADDRESS] = cluster.coordinator
        gpus = nodeenv.visible_gpu_count(base)
        if gpus:
            env[nodeenv.JAX_LOCAL_DEVICE_IDS] = ",".join(str(i) for i in range(gpus))
    return env


def job_env(spec: JobSpec, workdir: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The process environment: the runner's own (in an image: the image's, as the runner image
    leaves PATH alone), tcl's variables, the spec's env, the secrets."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if k not in _RUNNER_ONLY}
    env.update(public_env(spec, workdir, base))
    env.update(spec.secrets)
    return env


def job_out_dir(spec: JobSpec, workdir: Path) -> Path:
    """Where a ``tcl.jobs`` job keeps checkpoints, status, logs and results: ``$TCL_OUT_DIR``
    from the spec's env (a persistent mount, so a retry resumes), else ``<workdir>/out``."""
    return Path(spec.env.get("TCL_OUT_DIR") or workdir / "out")


def job_argv(
    spec: JobSpec, workdir: Path, config_file: Path, base: Mapping[str, str] | None = None
) -> list[str]:
    """``argv`` as given, or ``python -m tcl.jobs.launch KEY CONFIG OUT_DIR --run-id ...`` for a
    ``tcl.jobs`` job; its config travels as a file (data), never pasted into a command.

    The python is the runner's own where tcl is installed with its ``jobs`` extra (a host), and
    the image's ``python3`` (found on the job's PATH) in the runner image, whose venv has no JAX.
    """
    base = os.environ if base is None else base
    if spec.argv is not None:
        return list(spec.argv)
    job = spec.job
    if job is None:  # ``Runner.submit`` refuses such a spec first
        raise InvalidSpec("argv", "neither argv nor job is given: nothing to run")
    argv = [
        "python3" if base.get(JOB_TCL_PATH_VAR) else sys.executable,
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


def ssh_snippet(
    spec: JobSpec,
    workdir: Path,
    base: Mapping[str, str] | None = None,
    shell_env: Mapping[str, str] | None = None,
) -> str:
    """A POSIX shell snippet: ``cd`` to the working dir and export the job's public env and the
    variables that pick its interpreter (PATH...); ``shell_env`` last (the job's project
    environment: its PATH, VIRTUAL_ENV, PYTHONPATH)."""
    base = os.environ if base is None else base
    lines = [
        "# Written by tcl-runner when the job started: the job's working dir and environment",
        "# (its secrets are never written anywhere).",
    ]
    secret_names = set(spec.secrets)
    env = {k: base[k] for k in _SESSION_INHERITED if k in base}
    env.update(public_env(spec, workdir, base))
    env.update(shell_env or {})
    for key, value in sorted(env.items()):
        if key in secret_names or not key.isidentifier():
            continue
        lines.append(f"export {key}={shlex.quote(value)}")
    job_dir = workdir / spec.cwd if spec.cwd else workdir  # where the job itself started
    lines.append(f"cd {shlex.quote(str(job_dir))} 2>/dev/null || true")
    return "\n".join(lines) + "\n"


def write_ssh_snippet(
    path: Path, spec: JobSpec, workdir: Path, shell_env: Mapping[str, str] | None = None
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, ssh_snippet(spec, workdir, shell_env=shell_env).encode(), mode=0o644)
