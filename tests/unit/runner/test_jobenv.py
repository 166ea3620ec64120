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


# -- where the job sits (multi-node) ------------------------------------------------------------

SLURM_TASK_1 = {
    "SLURM_PROCID": "1",
    "SLURM_NTASKS": "2",
    "SLURM_RESTART_COUNT": "1",
    "TCL_COORDINATOR": "10.0.0.1:61447",
    "CUDA_VISIBLE_DEVICES": "4,5,6,7",
}


def test_each_node_learns_its_place_and_jax_its_coordinator(tmp_path: Path) -> None:
    env = job_env(ARGV, tmp_path, SLURM_TASK_1)
    placed = {k: env.get(k) for k in ("TCL_NODES", "TCL_NODE_RANK", "TCL_COORDINATOR")}
    assert placed == {"TCL_NODES": "2", "TCL_NODE_RANK": "1", "TCL_COORDINATOR": "10.0.0.1:61447"}
    assert env["JAX_COORDINATOR_ADDRESS"] == "10.0.0.1:61447"
    assert env["TCL_ATTEMPT"] == "1"  # the requeue's restart count


def test_jax_sees_every_gpu_of_the_node_by_its_cuda_number(tmp_path: Path) -> None:
    # CUDA numbers the devices it lets through 0..n-1: host GPUs 4-7 are JAX's devices 0-3.
    assert job_env(ARGV, tmp_path, SLURM_TASK_1)["JAX_LOCAL_DEVICE_IDS"] == "0,1,2,3"
    for hidden in ("", "NoDevFiles", "-1"):
        env = job_env(ARGV, tmp_path, {**SLURM_TASK_1, "CUDA_VISIBLE_DEVICES": hidden})
        assert "JAX_LOCAL_DEVICE_IDS" not in env, hidden
    no_gpus = {k: v for k, v in SLURM_TASK_1.items() if k != "CUDA_VISIBLE_DEVICES"}
    assert "JAX_LOCAL_DEVICE_IDS" not in job_env(ARGV, tmp_path, no_gpus)


def test_one_node_gets_no_jax_variables(tmp_path: Path) -> None:
    env = job_env(ARGV, tmp_path, {"TCL_COORDINATOR": "h:1", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert (env["TCL_NODES"], env["TCL_NODE_RANK"], env["TCL_COORDINATOR"]) == ("1", "0", "h:1")
    assert "JAX_COORDINATOR_ADDRESS" not in env and "JAX_LOCAL_DEVICE_IDS" not in env


def test_the_users_own_values_win(tmp_path: Path) -> None:
    own = {"JAX_LOCAL_DEVICE_IDS": "0", "JAX_COORDINATOR_ADDRESS": "mine:1", "TCL_ATTEMPT": "9"}
    spec = ARGV.model_copy(update={"env": own})
    env = job_env(spec, tmp_path, SLURM_TASK_1)
    assert {k: env[k] for k in own} == own


def test_ssh_sessions_see_the_same_place(tmp_path: Path) -> None:
    snippet = ssh_snippet(ARGV, tmp_path, SLURM_TASK_1)
    assert "export TCL_NODE_RANK=1\n" in snippet and "export TCL_NODES=2\n" in snippet
