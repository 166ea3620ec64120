"""The job's command: its argv, environment and secret values, as the runner starts it.

An argv job runs as given, a ``tcl.jobs`` job through its launcher (``jobenv.job_argv``), a
session as :mod:`tcl.runner.session` starts it; an argv job and a ``@tcl.remote`` call server in
a locked uv project run in that project's environment (:mod:`tcl.runner.projectenv`: built
first, then ``exec``'d into)."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tcl.runner import jobenv, projectenv, projectkernel
from tcl.runner import session as sessionmod
from tcl.runner.api import JobSpec, SessionKind
from tcl.runner.errors import ExecutorError, InvalidSpec
from tcl.runner.hangwatch import HangPolicy
from tcl.runner.metricline import Phase, phase_line


@dataclass(frozen=True)
class Command:
    argv: list[str]
    env: dict[str, str]
    secret_values: list[str]  # masked in its logs
    session: sessionmod.Session | None = None
    # what a shell in the job (`tcl ssh`) gets beyond the job's public env: the project
    # environment's PATH, VIRTUAL_ENV and PYTHONPATH, when the job runs in one
    shell_env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Where:
    """Where the job runs and what the host shares between jobs."""

    workdir: Path  # the shipped tree's root
    job_dir: Path  # where the job starts in it
    config_file: Path  # a ``tcl.jobs`` job's config
    state_dir: Path  # the runner's own
    compile_cache_dir: Path | None  # JAX's, shared by the host's jobs
    project_env_dir: Path | None  # the host's project environments (None: the state dir's)


def job_command(spec: JobSpec, where: Where) -> Command:
    """The job's command; a session's port and key are made here (``tcl.runner.session``)."""
    env = jobenv.job_env(spec, where.workdir)
    if where.compile_cache_dir is not None:
        with contextlib.suppress(OSError):  # JAX then compiles without it, as it would
            where.compile_cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        env = {**jobenv.compile_cache_env(where.compile_cache_dir), **env}
    if HangPolicy.of(spec.env) is not None:  # a hung job's stacks: dumped on its SIGABRT
        env.setdefault("PYTHONFAULTHANDLER", "1")
    secret_values = list(spec.secrets.values())
    own = spec.project_env and not sessionmod.in_image()
    if spec.argv is not None or spec.job is not None or spec.session is None:
        argv = jobenv.job_argv(spec, where.workdir, where.config_file)
        root = projectenv.find_project(where.job_dir, where.workdir) if own and spec.argv else None
        if root is None:
            return Command(argv, env, secret_values)
        shell = _shell_env(spec, root, where, env)
        return Command(in_project_env(spec, root, where, argv), env, secret_values, None, shell)
    remote = spec.session.kind is SessionKind.REMOTE
    root = projectenv.find_project(where.job_dir, where.workdir) if own else None
    try:
        launch = sessionmod.start_spec(
            spec.session,
            where.job_dir,
            env,
            sessionmod.in_image(),
            # the project's python, once its environment is built: checked by its start
            python="python" if root is not None and remote else None,
        )
    except ExecutorError as e:
        raise InvalidSpec("session", e.detail) from None
    env.update(launch.env)
    env.update(launch.secrets)
    argv = launch.argv
    if root is not None and remote:
        # the call server in the user's environment: tcl's package alone on its path (its
        # cloudpickle is the project's, as the notebook's is)
        only_tcl = projectenv.tcl_import_dir(where.state_dir)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (only_tcl, env.get("PYTHONPATH")) if p)
        argv = in_project_env(spec, root, where, argv)
    elif root is not None:
        # Jupyter Lab where it was found (by its path: the project's bin comes first on the
        # PATH it runs with), its notebooks' kernel in the user's environment
        found = shutil.which(argv[0], path=env.get("PATH"))
        argv = [found or argv[0], *argv[1:]]
        envs = where.project_env_dir or where.state_dir / "envs"
        python = envs / projectenv.env_key(root, spec.uv_groups) / "bin" / "python"
        env.update(projectkernel.kernel_env(where.state_dir, python, env))
        argv = in_project_env(spec, root, where, argv)
    return Command(argv, env, [*secret_values, *launch.secrets.values()], launch.session)


def _shell_env(spec: JobSpec, root: Path, where: Where, env: dict[str, str]) -> dict[str, str]:
    """The project environment's variables, as the launcher will set them (its directory is
    known before it is built: named by the lock's key)."""
    envs = where.project_env_dir or where.state_dir / "envs"
    active = projectenv.job_env_of(envs / projectenv.env_key(root, spec.uv_groups), root, env)
    return {k: active[k] for k in ("PATH", "VIRTUAL_ENV", "PYTHONPATH") if k in active}


def in_project_env(spec: JobSpec, root: Path, where: Where, argv: list[str]) -> list[str]:
    """``argv`` started in the environment of the uv project at ``root`` (built first)."""
    envs = where.project_env_dir or where.state_dir / "envs"
    groups = [a for g in spec.uv_groups for a in ("--group", g)]
    # the module as a script, without site: it imports only the standard library (a 15 ms
    # start on the job's critical path, not a whole interpreter's 50 ms)
    launcher = [sys.executable, "-I", "-S", projectenv.__file__]
    ready = ["--ready-line", phase_line(Phase.ENV_READY)]
    return [*launcher, "--root", str(root), "--envs", str(envs), *groups, *ready, "--", *argv]
