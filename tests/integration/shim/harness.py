"""Start a real ``tcl-shim`` process for integration tests, and clean up after it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tcl.runner.api import Event, JobSpec, RunnerState
from tcl.runner.client import RunnerClient
from tcl.shim.api import TaskInfo, TaskStatus
from tcl.shim.client import ShimClient
from tcl.shim.errors import ShimUnavailable
from tcl.shim.executors.cgroup import TaskProcesses

TOKEN = "integration-token-0123456789abcdef0123456789abcdef"  # >= 256 bits
PUBKEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTestsOnlyFakeKeyForTestsOnly00 test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Shim:
    state_dir: Path
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def instance(self) -> str:
        return (self.state_dir / "instance_id").read_text().strip()

    def client(self) -> ShimClient:
        return ShimClient(self.url, TOKEN)

    async def start(self) -> None:
        token_file = self.state_dir.parent / f"{self.state_dir.name}.token"
        if not token_file.exists():
            token_file.write_text(TOKEN)
            token_file.chmod(0o600)
        log = open(self.state_dir.parent / f"{self.state_dir.name}.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tcl.shim.main",
                "--port",
                str(self.port),
                "--state-dir",
                str(self.state_dir),
                "--token-file",
                str(token_file),
                "--reconcile-interval-s",
                "0.2",
                *self.args,
            ],
            env={**os.environ, **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        async with self.client() as c:
            for _ in range(300):
                try:
                    await c.healthcheck()
                    return
                except ShimUnavailable:
                    if self.proc.poll() is not None:
                        raise RuntimeError(f"tcl-shim exited: {self.logs()}") from None
                    await asyncio.sleep(0.05)
        raise RuntimeError(f"tcl-shim did not answer: {self.logs()}")

    def logs(self) -> str:
        return (self.state_dir.parent / f"{self.state_dir.name}.log").read_text()[-3000:]

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=20)


async def wait_status(
    client: ShimClient, task_id: str, *status: TaskStatus, timeout_s: float = 60
) -> TaskInfo:
    deadline = time.monotonic() + timeout_s
    while True:
        info = await client.get_task(task_id)
        if info.status in status:
            return info
        if time.monotonic() > deadline:
            raise AssertionError(f"task {task_id} stuck: {info}")
        await asyncio.sleep(0.05)


def runner_client(task: TaskInfo) -> RunnerClient:
    """The task's runner, reached with the port and bearer token its shim reported."""
    assert task.ports.runner is not None and task.runner_token is not None, task
    return RunnerClient(f"http://127.0.0.1:{task.ports.runner}", task.runner_token)


async def start_job(task: TaskInfo, argv: list[str], run_id: str = "r1") -> None:
    async with runner_client(task) as runner:
        await runner.wait_healthy(timeout_s=60)
        await runner.submit(JobSpec(run_id=run_id, argv=argv))
        await runner.run()


async def job_outcome(task: TaskInfo) -> tuple[RunnerState, str]:
    """Follow the job to its end; its final state and stdout."""
    out: list[Event] = []
    async with runner_client(task) as runner:
        async for event in runner.poll(0, wait_s=5):
            out.append(event)
        state = (await runner.healthcheck()).state
    return state, "".join(e.data or "" for e in out if e.stream == "stdout")


def cleanup_processes(instance: str) -> None:
    """Kill runner process groups left by a test (marked with the shim instance id), and any
    process left in the instance's task cgroups."""
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info.get("cmdline") or []
        if "--tcl-instance" in cmd and instance in cmd:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.info["pid"], signal.SIGKILL)
    # And every process and cgroup of its tasks (a killed shim cannot release them).
    tasks = TaskProcesses.discover(instance)
    root = tasks.cgroup_root
    for group in root.iterdir() if root is not None and root.is_dir() else ():
        if group.is_dir():
            tasks.release(group.name)
