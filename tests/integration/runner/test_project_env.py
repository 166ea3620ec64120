"""A job whose shipped tree is a uv project runs in that project's environment, built on the
host from its uv.lock (``tcl.runner.projectenv``), not in the runner's: real runners, real uv,
a project whose dependencies tcl does not have (``tests/uvproject.py``), no network."""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path

import pytest

from tcl.runner.api import CodeRef, JobRef, JobSpec, LogStream
from tcl.runner.projectenv import BUILD_FAILED
from tcl.runner.service import Runner, RunnerConfig
from tests.unit.runner.conftest import sha
from tests.uvproject import DEP, GROUP, GROUP_DEP, make_project

OFFLINE = {"UV_PYTHON_DOWNLOADS": "never", "UV_OFFLINE": "1"}


def _tarball(root: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in sorted(root.rglob("*")):
            if path.is_file():
                tar.add(path, arcname=str(path.relative_to(root)))
    return buf.getvalue()


def _run(tmp: Path, name: str, code: bytes, envs: Path, **spec: object) -> tuple[int, str]:
    """One job in a fresh runner sharing the host's ``envs``: its exit code and its log."""
    runner = Runner(RunnerConfig(state_dir=tmp / name, project_env_dir=envs))
    try:
        archive = tmp / f"{name}.tar.gz"
        archive.write_bytes(code)
        job = JobSpec(
            run_id=name,
            env=OFFLINE,
            code=CodeRef(sha256=sha(code), size=len(code)),
            **{"argv": None if "job" in spec else ["python", "job.py"], **spec},  # type: ignore[arg-type]
        )
        runner.submit(job)
        runner.use_code_file(archive)
        runner.run()
        assert runner.wait(300), "the job did not end"
        events, _ = runner.log.read(0, 100_000)
        text = "".join(
            e.data or ""
            for e in events
            if e.stream in (LogStream.STDOUT, LogStream.STDERR, LogStream.RUNNER)
        )
        return runner.machine.exit_code or 0, text
    finally:
        runner.close()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return _tarball(make_project(tmp_path_factory.mktemp("uvproject") / "repo"))


def test_the_job_imports_its_lock_s_dependency_and_the_env_is_built_once(
    tmp_path: Path, project: bytes
) -> None:
    envs = tmp_path / "envs"
    t0 = time.monotonic()
    code, first = _run(tmp_path, "first", project, envs)
    first_s = time.monotonic() - t0
    assert code == 0, first
    assert f"{DEP} yes" in first and "dep says from the project's lock" in first
    assert f"{GROUP_DEP} no" in first  # a group is synced only when asked for
    assert "(built in" in first
    (built,) = [p for p in envs.iterdir() if p.is_dir()]
    assert f"python {built}" in first  # the job's python is the project's environment

    t0 = time.monotonic()
    code, second = _run(tmp_path, "second", project, envs)
    second_s = time.monotonic() - t0
    assert code == 0, second
    assert f"python {built}" in second and "(reused)" in second
    print(f"first run {first_s:.2f} s (env built), second {second_s:.2f} s (env reused)")


def test_a_group_asked_for_is_synced_into_an_env_of_its_own(tmp_path: Path, project: bytes) -> None:
    envs = tmp_path / "envs"
    code, plain = _run(tmp_path, "plain", project, envs)
    code_g, grouped = _run(tmp_path, "grouped", project, envs, uv_groups=[GROUP])
    assert (code, code_g) == (0, 0), plain + grouped
    assert f"{GROUP_DEP} no" in plain and f"{GROUP_DEP} yes" in grouped
    assert len([p for p in envs.iterdir() if p.is_dir()]) == 2


def test_a_broken_lock_fails_the_job_with_uv_s_words_before_it_runs(
    tmp_path: Path, project: bytes
) -> None:
    repo = tmp_path / "repo"
    with tarfile.open(fileobj=io.BytesIO(project)) as tar:
        tar.extractall(repo, filter="data")
    (repo / "uv.lock").write_text("version = 1\n[[package]]\nthis is not toml\n")
    code, log = _run(tmp_path, "broken", _tarball(repo), tmp_path / "envs")
    assert code == BUILD_FAILED, log
    assert "python " not in log  # the job itself never ran
    last = [ln for ln in log.splitlines() if ln.strip()][-1]
    assert last.startswith("tcl: environment build failed: "), log
    assert "uv.lock" in log  # uv's own error names the file it could not read
    assert not [p for p in (tmp_path / "envs").iterdir() if p.is_dir()]  # nothing half-built


def test_a_project_without_a_lock_is_resolved_on_the_host(tmp_path: Path, project: bytes) -> None:
    """Issue 30: a pyproject.toml with no uv.lock is still the job's project: `uv sync`
    resolves it (offline here: its sources are wheels it keeps), the lock lands in the job's
    own copy of the tree, and the next run reuses the environment. A pyproject.toml that
    holds only tools' settings is no project: the job runs in the host's environment."""
    repo = tmp_path / "repo"
    with tarfile.open(fileobj=io.BytesIO(project)) as tar:
        tar.extractall(repo, filter="data")
    (repo / "uv.lock").unlink()
    unlocked = _tarball(repo)
    envs = tmp_path / "envs"
    code, first = _run(tmp_path, "unlocked", unlocked, envs)
    assert code == 0, first
    assert f"{DEP} yes" in first and "(built in" in first
    (built,) = [p for p in envs.iterdir() if p.is_dir()]
    assert f"python {built}" in first
    code, again = _run(tmp_path, "unlocked-again", unlocked, envs)
    assert code == 0 and f"python {built}" in again and "(reused)" in again, again

    tools_only = tmp_path / "tools-only"
    tools_only.mkdir()
    (tools_only / "pyproject.toml").write_text("[tool.ruff]\nline-length = 100\n")
    (tools_only / "job.py").write_text("import sys; print('python', sys.prefix)\n")
    code, log = _run(tmp_path, "tools", _tarball(tools_only), tmp_path / "envs-tools")
    assert code == 0 and "project's environment" not in log, log
    assert not (tmp_path / "envs-tools").exists()


def test_host_env_runs_without_the_project_s_environment(tmp_path: Path, project: bytes) -> None:
    code, log = _run(tmp_path, "host", project, tmp_path / "envs", project_env=False)
    assert code != 0 and f"{DEP} no" in log  # the host's python lacks the project's packages
    assert not (tmp_path / "envs").exists()


PROBE_JOB = """
import importlib.util, sys
from dataclasses import dataclass

from tcl.jobs.job import BasicJob
from tcl.jobs.registry import job


@dataclass
class Cfg:
    pass


@job("probe/where")
class Where(BasicJob[Cfg]):
    @classmethod
    def config(cls):
        return [Cfg]

    def run(self):
        import jax, tclprobe_dep

        print("python", sys.prefix)
        print("dep says", tclprobe_dep.HELLO)
        print("jax from", "lent" if "jobs-import" in jax.__file__ else jax.__file__)
"""


def test_a_tcl_jobs_job_runs_on_the_project_s_python(tmp_path: Path, project: bytes) -> None:
    """A ``job`` spec in a project runs tcl's launcher on the project environment's python:
    the job imports the lock's packages, and JAX & co., which this project does not list,
    are lent from the runner's environment after the project's own packages."""
    repo = tmp_path / "repo"
    with tarfile.open(fileobj=io.BytesIO(project)) as tar:
        tar.extractall(repo, filter="data")
    (repo / "probejobs.py").write_text(PROBE_JOB)
    pyproject = (repo / "pyproject.toml").read_text()
    (repo / "pyproject.toml").write_text(pyproject + '\n[tool.tcl]\njobs = ["probejobs"]\n')
    envs = tmp_path / "envs"
    code, log = _run(tmp_path, "tcljob", _tarball(repo), envs, job=JobRef(key="probe/where"))
    (built,) = [p for p in envs.iterdir() if p.is_dir()]
    assert code == 0, log
    assert f"python {built}\n" in log and "dep says from the project's lock" in log, log
    assert "jax from lent" in log, log
