"""The shim with the process executor: the same scenario as with Docker, on a host without it.

Docker is made unreachable for the shim (DOCKER_HOST points nowhere), so only the process
executor exists; the runner is the real ``tcl-runner`` from this environment.
"""

from __future__ import annotations

import os
import signal
import socket
from pathlib import Path

import httpx
import psutil
import pytest

from tcl.runner.api import RunnerState
from tcl.shim.api import ExecutorKind, NetworkMode, TaskSpec, TaskStatus, TerminationReason
from tcl.shim.errors import ExecutorUnavailable, NoCapacity, TaskNotTerminated
from tests.integration.shim.conftest import ShimFactory
from tests.integration.shim.harness import TOKEN, job_outcome, start_job, wait_status

NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
# Prints its GPUs once the test lets it (a file appears), however slow the shim's restart is.
WAIT_THEN_PRINT_GPUS = (
    "import os, sys, time\n"
    "while not os.path.exists(sys.argv[1]): time.sleep(0.05)\n"
    "print('gpus=' + os.environ['CUDA_VISIBLE_DEVICES'])\n"
)


async def test_process_executor_scenario(make_shim: ShimFactory, tmp_path: Path) -> None:
    shim = await make_shim("--fake-accelerators", "h100:2", env=NO_DOCKER)
    go = tmp_path / "go"
    print_gpus = ["python3", "-c", WAIT_THEN_PRINT_GPUS, str(go)]
    async with shim.client() as c:
        assert (await c.host()).executors == [ExecutorKind.PROCESS]
        with pytest.raises(ExecutorUnavailable, match="docker"):
            await c.submit_task(TaskSpec(id="d", image="x", executor=ExecutorKind.DOCKER))
        await _bad_input(shim.url)
        a = await c.submit_task(TaskSpec(id="a", accelerators=1))
        b = await c.submit_task(TaskSpec(id="b", accelerators=1))
        assert (a.accelerators, b.accelerators) == ([0], [1])
        assert a.executor is ExecutorKind.PROCESS and a.network is NetworkMode.HOST
        with pytest.raises(NoCapacity):
            await c.submit_task(TaskSpec(id="c", accelerators=1))
        a = await wait_status(c, "a", TaskStatus.RUNNING)
        b = await wait_status(c, "b", TaskStatus.RUNNING)
        assert a.ports.runner and b.ports.runner and a.ports.runner != b.ports.runner
        assert a.ports.ssh is None
        await start_job(a, print_gpus)
        await start_job(b, print_gpus)
        with pytest.raises(TaskNotTerminated):
            await c.remove_task("a")

    shim.kill(signal.SIGKILL)  # mid-job
    pid = _runner_pid(shim.state_dir / "tasks" / "a" / "task.json")
    assert psutil.pid_exists(pid)  # the runner outlived the shim (own session)
    shim2 = await make_shim("--fake-accelerators", "h100:2", env=NO_DOCKER, port=shim.port)
    async with shim2.client() as c:
        after = await c.get_task("a")
        assert after.status is TaskStatus.RUNNING
        assert after.accelerators == [0] and after.ports == a.ports
        with pytest.raises(NoCapacity):
            await c.submit_task(TaskSpec(id="c", accelerators=1))
        go.touch()
        for info in (a, b):
            state, stdout = await job_outcome(info)
            assert state is RunnerState.SUCCEEDED
            assert f"gpus={info.accelerators[0]}" in stdout
        # Each job's end alone frees its task (the adopted one too); the runners linger for
        # the logs until the tasks are removed. (A runner killed behind the shim's back:
        # test_task_lifecycle.py.)
        for task_id in ("a", "b"):
            done = await wait_status(c, task_id, TaskStatus.TERMINATED, timeout_s=20)
            assert (done.termination_reason, done.exit_code) == (TerminationReason.DONE, 0)
        assert psutil.pid_exists(pid)
        await c.remove_task("a")
        await c.remove_task("b")
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        assert (await c.list_tasks()) == []


def _runner_pid(task_json: os.PathLike[str]) -> int:
    import json
    from pathlib import Path

    pid = json.loads(Path(task_json).read_text())["handle"]["pid"]
    assert isinstance(pid, int)
    return pid


async def _bad_input(url: str) -> None:
    """Malformed spec → 422 naming the field; unknown id → 404; no token → 401."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=url, headers=auth, trust_env=False) as http:
        r = await http.post("/api/tasks", json={"id": "x", "accelerators": "two"})
        assert r.status_code == 422
        assert [d["field"] for d in r.json()["detail"]] == ["accelerators"], r.json()
        r = await http.post(
            "/api/tasks", content=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert r.status_code == 422 and r.json()["error"] == "invalid_request"
        r = await http.get("/api/tasks/no-such-task")
        assert r.status_code == 404 and r.json()["error"] == "not_found"
        r = await http.get("/api/tasks/no-such-task", params={"wait_s": 5})
        assert r.status_code == 404  # an unknown task is not waited for
        for bad in ("-1", "11", "nan", "soon"):
            r = await http.get("/api/tasks/no-such-task", params={"wait_s": bad})
            assert r.status_code == 422, (bad, r.text)
            assert [d["field"] for d in r.json()["detail"]] == ["wait_s"], r.json()
        r = await http.delete("/api/tasks/no-such-task")
        assert r.status_code == 404
        r = await http.get("/api/host", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401


async def test_a_launch_waits_for_its_tasks_start_in_one_request(make_shim: ShimFactory) -> None:
    """``GET /api/tasks/{id}?wait_s=N`` answers as the task starts (running, its runner's port
    known): a launch asks once instead of every 20 ms. A task that does not start within the
    wait is answered after it, where it stands."""
    shim = await make_shim("--fake-accelerators", "h100:1", env=NO_DOCKER)
    async with shim.client() as c:
        made = await c.submit_task(TaskSpec(id="w", accelerators=1))
        assert made.status is TaskStatus.PENDING  # answered before its lifecycle began
        info = await c.wait_task_started("w", 10)
        assert info.status is TaskStatus.RUNNING and info.ports.runner, info
        # its runner listens already (forked: reported running once it does): no refusal
        socket.create_connection(("127.0.0.1", info.ports.runner), timeout=5).close()
        await c.terminate_task("w")
        ended = await c.wait_task_started("w", 10)  # an ended task answers at once
        assert ended.status is TaskStatus.TERMINATED
