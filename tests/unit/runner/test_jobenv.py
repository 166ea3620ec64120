"""The job's environment in the runner image: the image's own, with tcl only for ``job`` specs."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from tcl.runner.api import JobRef, JobSpec
from tcl.runner.jobenv import job_argv, job_env, ssh_snippet

IMAGE = {
    "PATH": "/opt/conda/bin:/usr/bin:/bin",
    "PYTHONPATH": "/app/lib",
    "TCL_RUNNER_JOB_TCL_PATH": "/src/tcl",
    "TCL_RUNNER_SSH_ENV_FILE": "/run/tcl-runner/job-env.sh",
}
JOB = JobSpec(run_id="r", job=JobRef(key="gpt/train"))
ARGV = JobSpec(run_id="r", argv=["python", "train.py"], env={"A": "1"})


def test_a_job_spec_runs_the_images_python3_with_only_the_tcl_package_added(
    tmp_path: Path,
) -> None:
    argv = job_argv(JOB, tmp_path, tmp_path / "c.yaml", IMAGE)
    assert argv[:3] == ["python3", "-m", "tcl.jobs.launch"]
    env = job_env(JOB, tmp_path, IMAGE)
    assert env["PYTHONPATH"] == "/src/tcl:/app/lib" and env["PATH"] == IMAGE["PATH"]
    assert "TCL_RUNNER_JOB_TCL_PATH" not in env and "TCL_RUNNER_SSH_ENV_FILE" not in env


def test_an_argv_job_gets_the_images_env_untouched(tmp_path: Path) -> None:
    env = job_env(ARGV, tmp_path, IMAGE)
    assert (env["PATH"], env["PYTHONPATH"], env["A"]) == (IMAGE["PATH"], "/app/lib", "1")


def test_outside_an_image_a_job_spec_runs_on_the_runners_own_python(tmp_path: Path) -> None:
    base = {"PATH": "/usr/bin"}
    assert job_argv(JOB, tmp_path, tmp_path / "c.yaml", base)[0] == sys.executable
    assert "PYTHONPATH" not in job_env(JOB, tmp_path, base)


def test_the_ssh_snippet_gives_sessions_the_jobs_path(tmp_path: Path) -> None:
    snippet = ssh_snippet(JOB, tmp_path, IMAGE)
    shown = subprocess.run(
        ["sh", "-c", snippet + 'printf "%s\\n%s\\n" "$PATH" "$PYTHONPATH"'],
        env={"PATH": "/usr/bin:/bin"},  # sshd's clean environment
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert shown == [IMAGE["PATH"], "/src/tcl:/app/lib"], snippet
    assert shlex.quote(str(tmp_path)) in snippet


def test_ssh_sessions_start_where_the_job_started(tmp_path: Path) -> None:
    spec = JobSpec(run_id="r", argv=["true"], cwd="sub/deeper")
    snippet = ssh_snippet(spec, tmp_path / "work", base={})
    assert snippet.rstrip().endswith(
        f"cd {tmp_path / 'work' / 'sub' / 'deeper'} 2>/dev/null || true"
    )
