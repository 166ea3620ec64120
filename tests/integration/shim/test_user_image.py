"""A job in a user's image runs with the image's own python and packages, not tcl's runner venv.

The user images are built here from the local base with packages in the *system* python (no venv,
no network: the packages are copied from this venv's site-packages, same CPython 3.11 ABI), then
the runner image is built on top of each, as a user would with ``--build-arg BASE_IMAGE=...``.
Each task runs through the real shim (docker executor) and the runner in its container.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from tcl.runner.api import Event, JobRef, JobSpec, RunnerState
from tcl.shim.api import TaskInfo, TaskSpec, TaskStatus
from tests.integration.shim.conftest import ShimFactory
from tests.integration.shim.harness import runner_client, start_job, wait_status
from tests.testbed import DOCKER_CLI, REPO, build_image, build_runner_image, image_id

SITE = Path(sysconfig.get_paths()["purelib"])
SYSTEM_SITE = "/usr/local/lib/python3.11/dist-packages"  # Debian's python3 reads it; pip's target

# What the job reports about its interpreter, as `python3` and as `python`.
REPORT = (
    "import absl, json, os, sys; print(json.dumps({'exe': sys.executable, 'path': sys.path, "
    "'PATH': os.environ['PATH'], 'venv': os.environ.get('VIRTUAL_ENV'), "
    "'pythonpath': os.environ.get('PYTHONPATH')}))"
)

TINY_JOB = """\
job: gpt/train
architecture: {block_size: 16, n_layers: 1, d_model: 16, n_heads: 2}
training: {per_device_batch_size: 4, total_steps: 3, lr: 0.003, warmup_steps: 1}
logging: {report_interval: 1, validation_interval: 0, checkpoint_interval: 3}
data: {max_bytes: 20000}
"""


def _tag(name: str, *parts: str) -> str:
    return f"tcl-userimage-{name}:{hashlib.sha256('|'.join(parts).encode()).hexdigest()[:12]}"


@pytest.fixture(scope="session")
def absl_runner_image(docker_client: Any, base_image: str) -> str:
    """Runner image on a user image with absl (pure Python) in the system python."""
    files = sorted(p for p in (SITE / "absl").rglob("*.py"))
    digest = "|".join(f"{p.relative_to(SITE)}:{p.stat().st_size}" for p in files)
    user = build_image(
        _tag("absl", image_id(base_image), digest),
        SITE,
        f"FROM {base_image}\nCOPY absl {SYSTEM_SITE}/absl\n",
    )
    return build_runner_image(user)


@pytest.fixture(scope="session")
def jax_runner_image(docker_client: Any, base_image: str) -> str:
    """Runner image on a user image with JAX & co. in the system python: this venv's whole
    site-packages (the lock file fixes its contents), minus the editable hook to this checkout."""
    lock = (REPO / "uv.lock").read_text()
    user = build_image(
        _tag("jax", image_id(base_image), lock, sys.version),
        SITE,
        f"FROM {base_image}\nCOPY . {SYSTEM_SITE}/\n"
        f"RUN rm -f {SYSTEM_SITE}/_editable_impl_tcl.pth\n",
    )
    return build_runner_image(user)


async def _task(make_shim: ShimFactory, image: str) -> tuple[Any, TaskInfo]:
    shim = await make_shim("--executor", "docker", "--fake-accelerators", "h100:1")
    c = shim.client()
    async with c:
        await c.submit_task(TaskSpec(id="u", image=image, memory_bytes=4 * 2**30))
        info = await wait_status(c, "u", TaskStatus.RUNNING)
    return shim, info


async def _outcome(info: TaskInfo) -> tuple[RunnerState, str, str]:
    """Follow the job to its end: final state, stdout, stderr."""
    events: list[Event] = []
    async with runner_client(info) as runner:
        async for event in runner.poll(0, wait_s=5):
            events.append(event)
        state = (await runner.healthcheck()).state
    text = {s: "".join(e.data or "" for e in events if e.stream == s) for s in ("stdout", "stderr")}
    return state, text["stdout"], text["stderr"]


async def _run_job(info: TaskInfo, config_yaml: str) -> None:
    async with runner_client(info) as runner:
        await runner.wait_healthy(timeout_s=60)
        await runner.submit(
            JobSpec(run_id="j1", job=JobRef(key="gpt/train", config_yaml=config_yaml))
        )
        await runner.run()


def _ssh_session(container: str, command: str) -> str:
    """What ``tcl ssh HOST COMMAND`` runs: sshd's ForceCommand, from sshd's clean environment."""
    sshd_env = ["PATH=/usr/local/bin:/usr/bin:/bin", f"SSH_ORIGINAL_COMMAND={command}"]
    proc = subprocess.run(
        [DOCKER_CLI, "exec", container, "env", "-i", *sshd_env, "/usr/local/bin/tcl-ssh-session"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


async def test_job_and_ssh_get_the_images_python_and_packages(
    make_shim: ShimFactory, absl_runner_image: str
) -> None:
    shim, info = await _task(make_shim, absl_runner_image)
    script = f'python3 -c "{REPORT}" && python -c "{REPORT}"'
    await start_job(info, ["sh", "-c", script])
    state, stdout, stderr = await _outcome(info)
    assert state is RunnerState.SUCCEEDED, stderr
    reports = [json.loads(line) for line in stdout.splitlines()]
    assert [r["exe"] for r in reports] == ["/usr/bin/python3", "/usr/bin/python"]
    for r in reports:
        assert not any("/opt/tcl" in p for p in r["path"]), r["path"]
        assert "/opt/tcl" not in r["PATH"] and r["venv"] is None and r["pythonpath"] is None
        assert SYSTEM_SITE in r["path"]

    # An ssh session finds the same `python` as the job, with the job's PATH.
    session = json.loads(_ssh_session(f"tcl-{shim.instance}-u", f'python -c "{REPORT}"'))
    assert (session["exe"], session["PATH"]) == (reports[1]["exe"], reports[1]["PATH"])


async def test_job_spec_names_what_the_image_lacks(
    make_shim: ShimFactory, absl_runner_image: str
) -> None:
    _, info = await _task(make_shim, absl_runner_image)
    await _run_job(info, TINY_JOB)
    state, _, stderr = await _outcome(info)
    assert state is RunnerState.FAILED
    # The image's python, and every job dependency it lacks, named in the run's log.
    assert "/usr/bin/python3 cannot import jax, jaxlib, flax, optax, orbax-checkpoint" in stderr
    assert "docs/runner.md" in stderr and "Traceback" not in stderr


@pytest.mark.slow  # the JAX user image: ~30 s to build once, then the job imports JAX
async def test_job_spec_runs_on_an_image_with_jax_in_its_system_python(
    make_shim: ShimFactory, jax_runner_image: str
) -> None:
    _, info = await _task(make_shim, jax_runner_image)
    await _run_job(info, TINY_JOB)
    state, stdout, stderr = await _outcome(info)
    assert state is RunnerState.SUCCEEDED, stderr[-3000:]
    assert "/opt/tcl" not in stdout + stderr
