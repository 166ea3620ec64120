"""Waiting on a shim-based launch: tasks until they run, runners until they answer, all nodes
together (the first failure cancels the rest)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tcl.control.backends.base import Observer
from tcl.control.backends.shimhost import ShimHost
from tcl.control.errors import AgentError, NoCapacityError
from tcl.control.transport.agents import RunnerApi
from tcl.shim.api import TaskInfo, TaskStatus, TerminationReason
from tcl.shim.startwait import started

TASK_START_TIMEOUT_S = 600.0  # image pulls can be slow
RUNNER_READY_TIMEOUT_S = 150.0  # beyond the shim's start grace for a runner (probe.py)
# Polls are one small request over an open forward; a container starts in ~0.3-0.5 s, so a
# coarse interval would add a large share of it to every submit.
POLL_INTERVAL_S = 0.02
# A task's start is waited for by the shim (it answers as the task starts): a status line each
# this often meanwhile (an image pull's progress)
START_WAIT_S = 1.0
TASK_CHECK_S = 1.0  # a runner that has not answered for this long: is its task still there?


async def wait_task(host: ShimHost, task: TaskInfo, obs: Observer) -> TaskInfo:
    shim = await host.shim()
    deadline = time.monotonic() + TASK_START_TIMEOUT_S
    while True:
        if task.status is TaskStatus.TERMINATED:
            if task.termination_reason is TerminationReason.NO_CAPACITY:
                raise NoCapacityError(task.message or "no capacity")
            why = task.termination_reason.value if task.termination_reason else "terminated"
            raise AgentError(f"task {task.id} on {host.name} failed: {why}: {task.message}")
        if started(task):  # running, its runner's port known: what the shim's wait answers on
            return task
        if time.monotonic() > deadline:
            raise AgentError(f"task {task.id} did not start within {TASK_START_TIMEOUT_S:.0f} s")
        detail = f" {task.pull_progress:.0%}" if task.pull_progress is not None else ""
        obs.status(f"{host.name}: {task.status.value}{detail}")
        asked = time.monotonic()
        task = await shim.wait_task_started(task.id, START_WAIT_S)
        quick = POLL_INTERVAL_S - (time.monotonic() - asked)
        if quick > 0 and not started(task):
            await asyncio.sleep(quick)  # a shim that does not wait (older): polled as before


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


async def wait_runner(runner: RunnerApi, task_ended: Callable[[], Awaitable[str | None]]) -> None:
    """Until the runner answers; ``task_ended`` (asked once it has not answered for
    ``TASK_CHECK_S``, then as often) says why its task ended on the host, None while it has
    not: a runner that died before it answered fails the launch at once, not after the
    timeout."""
    start = time.monotonic()
    checked = start
    while True:
        try:
            await runner.healthcheck()
            return
        except AgentError:
            now = time.monotonic()
            waited = now - start
            if now - checked >= TASK_CHECK_S:
                checked = now
                why = await task_ended()
                if why is not None:
                    raise AgentError(why) from None
            if waited > RUNNER_READY_TIMEOUT_S:
                raise
            # quick polls while a runner normally starts; slower ones on a loaded host, where
            # many submits of one `tcl serve` would otherwise spend its CPU on polling
            await asyncio.sleep(POLL_INTERVAL_S if waited < 2.0 else 0.25)


async def task_ended(host: ShimHost, task_id: str) -> str | None:
    """Why the host's task ended (None while it has not)."""
    task = await (await host.shim()).get_task(task_id)
    if task.status is not TaskStatus.TERMINATED:
        return None
    why = task.termination_reason.value if task.termination_reason else "terminated"
    return f"task {task.id} on {host.name} ended before its runner answered: {why}: {task.message}"
