"""The job's command: its argv, environment and secret values, as the runner starts it.

An argv job runs as given, a ``tcl.jobs`` job through its launcher (``jobenv.job_argv``), a
session as :mod:`tcl.runner.session` starts it; each of them in a uv project runs in that
project's environment (:mod:`tcl.runner.projectenv`: built first, then ``exec``'d into), in an
image built on the image's ``python3``, whose packages it sees after the project's."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tcl.runner import jobenv, lend, projectenv, projectkernel
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


@dataclass(frozen=True)
class Project:
    """The uv project the job runs in, and where its environment is (or will be) built."""

    root: Path
    env_dir: Path
    base_python: str | None  # in an image: the image's interpreter it is built on


def find_project(spec: JobSpec, where: Where, env: dict[str, str]) -> Project | None:
    """The job's project (None: the host's environment, or the image's as it is). In an image
    the environment is built on the image's ``python3`` (the first on the job's PATH)."""
    if not spec.project_env:
        return None
    root = projectenv.find_project(where.job_dir, where.workdir)
    if root is None:
        return None
    base = None
    if sessionmod.in_image():
        found = shutil.which("python3", path=env.get("PATH"))
        if found is None:  # nothing to build on: the image's environment as it is
            return None
        base = os.path.realpath(found)
    envs = where.project_env_dir or where.state_dir / "envs"
    return Project(root, envs / projectenv.env_key(root, spec.uv_groups, base), base)


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
    project = find_project(spec, where, env)
    if spec.argv is not None or spec.job is not None or spec.session is None:
        argv = jobenv.job_argv(spec, where.workdir, where.config_file)
        if project is None:
            return Command(argv, env, secret_values)
        if spec.job is not None:
            # tcl's launcher on the project's python, tcl's package added to its path, and
            # JAX & co. lent after the project's own packages where it lacks them (not in an
            # image: there the image provides them, ``tcl.jobs.deps`` naming any missing)
            argv = ["python", *argv[1:]]
            _lend_tcl(env, where)
            if not sessionmod.in_image():
                env.update(_lend_job_deps(where))
        shell = _shell_env(project, env)
        return Command(in_project_env(spec, project, argv), env, secret_values, None, shell)
    remote = spec.session.kind is SessionKind.REMOTE
    try:
        launch = sessionmod.start_spec(
            spec.session,
            where.job_dir,
            env,
            sessionmod.in_image(),
            # the project's python, once its environment is built: checked by its start
            python="python" if project is not None and remote else None,
        )
    except ExecutorError as e:
        raise InvalidSpec("session", e.detail) from None
    env.update(launch.env)
    env.update(launch.secrets)
    argv = launch.argv
    if project is not None and remote:
        # the call server in the user's environment: tcl's package alone on its path (its
        # cloudpickle is the project's, as the notebook's is)
        _lend_tcl(env, where)
        argv = in_project_env(spec, project, argv)
    elif project is not None:
        # Jupyter Lab where it was found (by its path: the project's bin comes first on the
        # PATH it runs with), its notebooks' kernel in the user's environment
        found = shutil.which(argv[0], path=env.get("PATH"))
        argv = [found or argv[0], *argv[1:]]
        python = project.env_dir / "bin" / "python"
        env.update(projectkernel.kernel_env(where.state_dir, python, env))
        argv = in_project_env(spec, project, argv)
    return Command(argv, env, [*secret_values, *launch.secrets.values()], launch.session)


def _lend_tcl(env: dict[str, str], where: Where) -> None:
    """tcl's package (and nothing else of the runner's environment) on the job's path."""
    only_tcl = projectenv.tcl_import_dir(where.state_dir)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (only_tcl, env.get("PYTHONPATH")) if p)


def _lend_job_deps(where: Where) -> dict[str, str]:
    """The launcher's view of ``tcl.jobs``' dependencies as the runner has them."""
    from tcl.jobs.deps import JOB_DEPENDENCIES, LENT_PATH_VAR, LENT_PYTHON_VAR

    links = lend.link_dir(where.state_dir / "jobs-import", tuple(JOB_DEPENDENCIES.values()))
    return {LENT_PATH_VAR: str(links), LENT_PYTHON_VAR: "{}.{}".format(*sys.version_info[:2])}


def _shell_env(project: Project, env: dict[str, str]) -> dict[str, str]:
    """The project environment's variables, as the launcher will set them (its directory is
    known before it is built: named by the lock's key)."""
    active = projectenv.job_env_of(project.env_dir, project.root, env)
    return {k: active[k] for k in ("PATH", "VIRTUAL_ENV", "PYTHONPATH") if k in active}


def in_project_env(spec: JobSpec, project: Project, argv: list[str]) -> list[str]:
    """``argv`` started in the environment of the uv project (built first)."""
    groups = [a for g in spec.uv_groups for a in ("--group", g)]
    base = ["--base-python", project.base_python] if project.base_python else []
    # the module as a script, without site: it imports only the standard library (a 15 ms
    # start on the job's critical path, not a whole interpreter's 50 ms)
    launcher = [sys.executable, "-I", "-S", projectenv.__file__]
    ready = ["--ready-line", phase_line(Phase.ENV_READY)]
    return [
        *launcher,
        *("--root", str(project.root), "--envs", str(project.env_dir.parent)),
        *groups,
        *base,
        *ready,
        "--",
        *argv,
    ]
