"""Waiting on a shim-based launch: tasks until they run, runners until they answer, all nodes
together (the first failure cancels the rest)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tcl.control.backends.base import Observer
from tcl.control.backends.shimhost import ShimHost
from tcl.control.errors import AgentError, NoCapacityError
from tcl.control.transport.agents import RunnerApi
from tcl.shim.api import TaskInfo, TaskStatus, TerminationReason

TASK_START_TIMEOUT_S = 600.0  # image pulls can be slow
RUNNER_READY_TIMEOUT_S = 150.0  # beyond the shim's start grace for a runner (probe.py)
# Polls are one small request over an open forward; a container starts in ~0.3-0.5 s, so a
# coarse interval would add a large share of it to every submit.
POLL_INTERVAL_S = 0.02


async def wait_task(host: ShimHost, task: TaskInfo, obs: Observer) -> TaskInfo:
    shim = await host.shim()
    deadline = time.monotonic() + TASK_START_TIMEOUT_S
    while True:
        if task.status is TaskStatus.RUNNING and task.ports.runner is not None:
            return task
        if task.status is TaskStatus.TERMINATED:
            if task.termination_reason is TerminationReason.NO_CAPACITY:
                raise NoCapacityError(task.message or "no capacity")
            why = task.termination_reason.value if task.termination_reason else "terminated"
            raise AgentError(f"task {task.id} on {host.name} failed: {why}: {task.message}")
        if time.monotonic() > deadline:
            raise AgentError(f"task {task.id} did not start within {TASK_START_TIMEOUT_S:.0f} s")
        detail = f" {task.pull_progress:.0%}" if task.pull_progress is not None else ""
        obs.status(f"{host.name}: {task.status.value}{detail}")
        await asyncio.sleep(POLL_INTERVAL_S)
        task = await shim.get_task(task.id)


async def all_or_raise(coros: list[Any]) -> list[Any]:
    """Run concurrently; on the first failure cancel the rest and raise it."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def wait_runner(runner: RunnerApi) -> None:
    start = time.monotonic()
    while True:
        try:
            await runner.healthcheck()
            return
        except AgentError:
            waited = time.monotonic() - start
            if waited > RUNNER_READY_TIMEOUT_S:
                raise
            # quick polls while a runner normally starts; slower ones on a loaded host, where
            # many submits of one `tcl serve` would otherwise spend its CPU on polling
            await asyncio.sleep(POLL_INTERVAL_S if waited < 2.0 else 0.25)
