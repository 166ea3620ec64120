"""The host's code cache through a real shim and real runners, with each executor.

The first task's runner receives the tarball (PUT /api/code) and extracts it into the shim's
``code-cache``; the second task's runner installs the same code from there (POST
/api/code/cached) without an upload; with docker, as the task names its code, that working dir
is an overlay on the cached tree (no copy at all). The first job overwrites a shipped file in
place: the second job must still see the shipped content, and the cache must not change.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tcl.runner.api import CodeRef, JobSpec, RunnerState
from tcl.runner.client import RunnerAPIError
from tcl.shim.api import TaskInfo, TaskSpec, TaskStatus
from tests.integration.shim.conftest import ShimFactory
from tests.integration.shim.harness import job_outcome, runner_client, wait_status

NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
JOB = [
    "python3",
    "-c",
    "print('got=' + open('lib/x.py').read()); open('lib/x.py', 'w').write('CORRUPT')",
]


def tarball() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in {"lib/x.py": b"SHIPPED", "main.py": b"print(1)\n"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


async def run_with_code(task: TaskInfo, run_id: str, code: bytes, cached: bool) -> str:
    sha = hashlib.sha256(code).hexdigest()
    async with runner_client(task) as runner:
        await runner.wait_healthy(timeout_s=60)
        await runner.submit(
            JobSpec(run_id=run_id, argv=JOB, code=CodeRef(sha256=sha, size=len(code)))
        )
        if cached:
            assert (await runner.use_cached_code(sha)).state is RunnerState.READY
        else:
            with pytest.raises(RunnerAPIError) as e:
                await runner.use_cached_code(sha)
            assert e.value.error == "code_not_cached"
            await runner.upload_code(code, sha)
        await runner.run()
    state, stdout = await job_outcome(task)
    assert state is RunnerState.SUCCEEDED, stdout
    return stdout


@pytest.mark.parametrize("executor", ["process", "docker"])
async def test_second_task_takes_the_tree_from_the_cache(
    make_shim: ShimFactory, runner_image: str, docker_client: Any, executor: str
) -> None:
    env = NO_DOCKER if executor == "process" else {}
    shim = await make_shim("--executor", executor, env=env)
    code = tarball()
    sha = hashlib.sha256(code).hexdigest()
    tree = Path(shim.state_dir) / "code-cache" / "trees" / sha
    async with shim.client() as c:
        for task_id, cached in (("one", False), ("two", True)):
            await c.submit_task(TaskSpec(id=task_id, image=runner_image, code_sha256=sha))
            info = await wait_status(c, task_id, TaskStatus.RUNNING)
            assert info.ports.runner
            stdout = await run_with_code(info, task_id, code, cached)
            assert "got=SHIPPED" in stdout  # the second job does not see the first one's write
            assert (tree / "lib/x.py").read_bytes() == b"SHIPPED"
            if executor == "docker":
                container = docker_client.containers.get(f"tcl-{shim.instance}-{task_id}")
                work = [
                    m
                    for m in container.attrs["Mounts"]
                    if m["Destination"] == "/var/lib/tcl-runner/work"
                ]
                assert bool(work) is cached  # an overlay once the host has the tree
                upper = Path(shim.state_dir) / "tasks" / task_id / "code-upper"
                if cached:  # the job's write went to the task's upper layer
                    assert (upper / "lib/x.py").read_bytes() == b"CORRUPT"
            await c.terminate_task(task_id, timeout_s=10)
            await c.remove_task(task_id)
