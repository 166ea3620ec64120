"""The shim with the docker executor against real dockerd and the real runner image.

Accelerators are fake (``--fake-accelerators``): there is no GPU here, so no NVIDIA runtime
and no device requests; the allocation reaches the container as CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tcl.runner.api import RunnerState
from tcl.shim.api import NetworkMode, TaskSpec, TaskStatus, TerminationReason
from tcl.shim.errors import NoCapacity, NotFound
from tests.integration.shim.conftest import ShimFactory
from tests.integration.shim.harness import (
    PUBKEY,
    free_port,
    job_outcome,
    start_job,
    wait_status,
)

PRINT_GPUS = ["python3", "-c", "import os; print('gpus=' + os.environ['CUDA_VISIBLE_DEVICES'])"]


def ssh_banner(port: int) -> bytes:
    for _ in range(100):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                data = s.recv(64)
                if data:
                    return data
        except OSError:
            pass
        time.sleep(0.1)
    return b""


async def test_submit_reach_runner_run_terminate_remove(
    make_shim: ShimFactory, runner_image: str, docker_client: Any
) -> None:
    shim = await make_shim("--executor", "docker", "--fake-accelerators", "h100:4")
    async with shim.client() as c:
        info = await c.submit_task(
            TaskSpec(
                id="e2e",
                image=runner_image,
                accelerators=1,
                ssh_keys=[PUBKEY],
                cpus=1,
                memory_bytes=2**30,
                shm_bytes=64 * 2**20,
            )
        )
        assert info.network is NetworkMode.BRIDGE and info.accelerators == [0]
        info = await wait_status(c, "e2e", TaskStatus.RUNNING)
        assert info.ports.runner and info.ports.ssh and info.ports.runner != info.ports.ssh

        container = docker_client.containers.get(f"tcl-{shim.instance}-e2e")
        assert container.labels["tcl.shim.task-id"] == "e2e"
        bindings = container.attrs["NetworkSettings"]["Ports"]
        assert {b["HostIp"] for k in ("10999/tcp", "10022/tcp") for b in bindings[k]} == {
            "127.0.0.1"
        }
        host_config = container.attrs["HostConfig"]
        assert host_config["NanoCpus"] == 10**9 and host_config["Memory"] == 2**30
        assert host_config["ShmSize"] == 64 * 2**20
        assert not host_config.get("DeviceRequests")  # no NVIDIA runtime here

        await start_job(info, PRINT_GPUS)
        state, stdout = await job_outcome(info)
        assert state is RunnerState.SUCCEEDED and "gpus=0" in stdout
        assert ssh_banner(info.ports.ssh).startswith(b"SSH-2.0")

        # The job's end alone frees the GPU; the runner's container lingers to serve the logs.
        done = await wait_status(c, "e2e", TaskStatus.TERMINATED)
        assert (done.termination_reason, done.exit_code) == (TerminationReason.DONE, 0)
        assert (await c.host()).accelerators[0].task_id is None
        assert container.reload() is None and container.status == "running"
        done = await c.terminate_task("e2e", timeout_s=10)  # repeatable: the first reason stays
        assert done.termination_reason is TerminationReason.DONE
        await c.remove_task("e2e")
        with pytest.raises(NotFound):
            await c.get_task("e2e")
        assert not docker_client.containers.list(
            all=True, filters={"name": f"tcl-{shim.instance}-e2e"}
        )


async def test_two_bridge_tasks_disjoint_third_refused(
    make_shim: ShimFactory, runner_image: str, docker_client: Any
) -> None:
    shim = await make_shim("--fake-accelerators", "h100:4")
    async with shim.client() as c:
        a, b = await asyncio.gather(
            c.submit_task(TaskSpec(id="a", image=runner_image, accelerators=2)),
            c.submit_task(TaskSpec(id="b", image=runner_image, accelerators=2)),
        )
        assert sorted([a.accelerators, b.accelerators]) == [[0, 1], [2, 3]]
        t0 = time.perf_counter()
        with pytest.raises(NoCapacity) as refused:
            await c.submit_task(TaskSpec(id="c", image=runner_image, accelerators=1))
        assert time.perf_counter() - t0 < 0.5
        assert refused.value.free == []
        a = await wait_status(c, "a", TaskStatus.RUNNING)
        b = await wait_status(c, "b", TaskStatus.RUNNING)
        assert a.network is b.network is NetworkMode.BRIDGE
        ports = {a.ports.runner, a.ports.ssh, b.ports.runner, b.ports.ssh}
        assert len(ports) == 4 and None not in ports
        for info in (a, b):
            env = docker_client.containers.get(f"tcl-{shim.instance}-{info.id}").attrs["Config"][
                "Env"
            ]
            want = ",".join(map(str, info.accelerators))
            assert f"CUDA_VISIBLE_DEVICES={want}" in env
            assert f"TCL_ACCELERATORS={want}" in env
        await asyncio.gather(c.terminate_task("a", timeout_s=2), c.terminate_task("b", timeout_s=2))


# Runs until the test lets it finish (a file appears), however slow the shim's restart is.
UNTIL_GO = (
    "import os, time\nwhile not os.path.exists('/tmp/go'): time.sleep(0.1)\nprint('finished')"
)


async def test_sigkill_shim_mid_task_then_restart(
    make_shim: ShimFactory, runner_image: str, docker_client: Any
) -> None:
    shim = await make_shim("--fake-accelerators", "h100:2")
    async with shim.client() as c:
        await c.submit_task(TaskSpec(id="k", image=runner_image, accelerators=1))
        before = await wait_status(c, "k", TaskStatus.RUNNING)
        assert before.ports.runner is not None
        await start_job(before, ["python3", "-c", UNTIL_GO])
    shim.kill()  # SIGKILL while the job runs
    shim2 = await make_shim("--fake-accelerators", "h100:2", state="shim", port=shim.port)
    async with shim2.client() as c:
        after = await c.get_task("k")
        assert after.status is TaskStatus.RUNNING
        assert after.accelerators == before.accelerators and after.ports == before.ports
        with pytest.raises(NoCapacity):  # the adopted task still holds its GPU
            await c.submit_task(TaskSpec(id="k2", image=runner_image, accelerators=2))
        docker_client.containers.get(f"tcl-{shim.instance}-k").exec_run(["touch", "/tmp/go"])
        state, stdout = await job_outcome(after)
        assert state is RunnerState.SUCCEEDED and "finished" in stdout
        done = await wait_status(c, "k", TaskStatus.TERMINATED)  # the job's end frees it
        assert (done.termination_reason, done.exit_code) == (TerminationReason.DONE, 0)
        await c.remove_task("k")


async def test_orphans_and_stray_dirs_are_cleaned_up(
    make_shim: ShimFactory, base_image: str, docker_client: Any, tmp_path: Path
) -> None:
    shim = await make_shim("--fake-accelerators", "h100:1", state="orph")
    stray = tmp_path / "orph" / "tasks" / "leftover"
    stray.mkdir()
    orphan = docker_client.containers.run(
        base_image,
        ["sleep", "300"],
        detach=True,
        name=f"tcl-{shim.instance}-ghost",
        labels={"tcl.shim.task-id": "ghost", "tcl.shim.instance": shim.instance},
    )
    other = docker_client.containers.run(  # another shim's container: not ours to remove
        base_image,
        ["sleep", "300"],
        detach=True,
        name=f"tcl-other-{shim.instance}",
        labels={"tcl.shim.task-id": "ghost", "tcl.shim.instance": f"not-{shim.instance}"},
    )
    try:
        for _ in range(100):
            # the low-level list: the high-level one inspects each container it lists, and
            # one removed in between (the orphan, by the shim) raised NotFound (CI46)
            if not docker_client.api.containers(all=True, filters={"id": orphan.id}):
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("orphan container was not removed")
        other.reload()
        assert other.status == "running"
    finally:
        other.remove(force=True)
    shim.kill()
    await make_shim("--fake-accelerators", "h100:1", state="orph")  # start-up removes stray dirs
    assert not stray.exists()


async def test_missing_image_is_image_error(make_shim: ShimFactory) -> None:
    shim = await make_shim("--fake-accelerators", "h100:1")
    async with shim.client() as c:
        await c.submit_task(
            TaskSpec(id="nope", image="127.0.0.1:9/tcl-no-such-image:1", accelerators=1)
        )
        info = await wait_status(c, "nope", TaskStatus.TERMINATED)
        assert info.termination_reason is TerminationReason.IMAGE_ERROR
        assert "tcl-no-such-image" in info.message and "refused" in info.message
        assert (await c.host()).accelerators[0].task_id is None


async def test_pull_that_stops_progressing_times_out(make_shim: ShimFactory) -> None:
    """A 'registry' that accepts connections and never answers: the pull stalls."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    port = server.getsockname()[1]
    try:
        shim = await make_shim("--pull-stall-timeout-s", "2")
        async with shim.client() as c:
            t0 = time.monotonic()
            await c.submit_task(TaskSpec(id="stall", image=f"127.0.0.1:{port}/stall:1"))
            info = await wait_status(c, "stall", TaskStatus.TERMINATED, timeout_s=60)
            assert info.termination_reason is TerminationReason.IMAGE_ERROR
            assert "no progress for 2 s" in info.message, info.message
            assert time.monotonic() - t0 < 30
    finally:
        stop.set()
        t.join()
        for s in held:
            s.close()
        server.close()
        _ = free_port


async def test_whole_host_task_uses_the_host_network(
    make_shim: ShimFactory, runner_image: str, docker_client: Any
) -> None:
    shim = await make_shim("--fake-accelerators", "h100:2")
    async with shim.client() as c:
        info = await c.submit_task(
            TaskSpec(id="whole", image=runner_image, accelerators="all", ssh_keys=[PUBKEY])
        )
        assert info.network is NetworkMode.HOST and info.accelerators == [0, 1]
        info = await wait_status(c, "whole", TaskStatus.RUNNING)
        assert info.ports.runner and info.ports.ssh
        attrs = docker_client.containers.get(f"tcl-{shim.instance}-whole").attrs
        assert attrs["HostConfig"]["NetworkMode"] == "host"
        assert attrs["Args"][1:3] == ["--host", "127.0.0.1"]  # the runner binds loopback only
        await start_job(info, PRINT_GPUS)
        state, stdout = await job_outcome(info)
        assert state is RunnerState.SUCCEEDED and "gpus=0,1" in stdout
        assert ssh_banner(info.ports.ssh).startswith(b"SSH-2.0")
        # The container sshd shares the host's network: it must listen on loopback only.
        listening = (
            docker_client.containers.get(f"tcl-{shim.instance}-whole")
            .exec_run(["sh", "-c", "cat /proc/net/tcp"])
            .output.decode()
        )
        ssh_port_hex = f"{info.ports.ssh:04X}"
        binds = [
            ln.split()[1]
            for ln in listening.splitlines()[1:]
            if ln.split()[1].endswith(":" + ssh_port_hex) and ln.split()[3] == "0A"
        ]
        assert binds == ["0100007F:" + ssh_port_hex], binds
        await c.terminate_task("whole", timeout_s=5)
        await c.remove_task("whole")


# The job starts a daemon in a session of its own, then exits.
DAEMON_THEN_EXIT = [
    "python3",
    "-c",
    "import subprocess; subprocess.Popen(['sleep', '600'], start_new_session=True); print('ok')",
]


async def test_daemons_of_a_finished_job_die_while_the_runner_lingers(
    make_shim: ShimFactory, runner_image: str, docker_client: Any
) -> None:
    """The runner (the container's PID 1) ends what the job left running when the job ends;
    the container stays up to serve the logs, holding nothing that uses the GPU."""
    shim = await make_shim("--executor", "docker", "--fake-accelerators", "h100:1")
    async with shim.client() as c:
        spec = TaskSpec(id="dd", image=runner_image, accelerators=1, ssh_keys=[PUBKEY])
        info = await wait_status(c, (await c.submit_task(spec)).id, TaskStatus.RUNNING)
        await start_job(info, DAEMON_THEN_EXIT)
        state, stdout = await job_outcome(info)
        assert state is RunnerState.SUCCEEDED and stdout == "ok\n"
        done = await wait_status(c, "dd", TaskStatus.TERMINATED)
        assert done.termination_reason is TerminationReason.DONE
        container = docker_client.containers.get(f"tcl-{shim.instance}-dd")
        assert container.status == "running"  # serving the logs
        procs = [" ".join(p[-1:]) for p in container.top()["Processes"]]
        assert not any("sleep 600" in p for p in procs), procs
        await c.remove_task("dd")
