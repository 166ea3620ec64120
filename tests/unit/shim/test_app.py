"""The HTTP API through the typed client, on the real app and service (in-process ASGI).

The executor is the in-memory FakeExecutor (fakes.py): Docker and real runners are covered by
tests/integration/shim.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tcl.shim.api import (
    ExecutorKind,
    HealthInfo,
    PreemptionNotice,
    TaskSpec,
    TaskStatus,
    TerminationReason,
)
from tcl.shim.app import create_app
from tcl.shim.client import ShimClient
from tcl.shim.clusterfs import ClusterMounts
from tcl.shim.errors import (
    BadRequest,
    ExecutorUnavailable,
    NoCapacity,
    NotFound,
    ShimUnavailable,
    TaskExists,
    TaskNotTerminated,
    Unauthorized,
)
from tcl.shim.inventory import discover
from tcl.shim.reconcile import Reconciler
from tcl.shim.service import TaskService
from tcl.shim.store import TaskStore
from tests.polling import await_until
from tests.unit.shim.fakes import FakeExecutor

TOKEN = "s3cret-token"


@dataclass
class Env:
    client: ShimClient
    executor: FakeExecutor
    service: TaskService
    reconciler: Reconciler
    app: httpx.ASGITransport
    state_dir: Path

    async def aclose(self) -> None:
        await self.reconciler.close()
        await self.service.close()
        await self.client.aclose()


async def make_env(state_dir: Path, alive: dict[str, int] | None = None) -> Env:
    ex = FakeExecutor()
    ex.alive = dict(alive or {})  # workloads that exist before the shim starts
    service = TaskService(
        store=TaskStore(state_dir),
        inventory=discover("h100:4"),
        executors={ExecutorKind.DOCKER: ex},
        default_executor=ExecutorKind.DOCKER,
        mounts=ClusterMounts(state_dir),
    )
    reconciler = Reconciler(service, interval_s=0.05)
    await reconciler.start()
    transport = httpx.ASGITransport(app=create_app(service, TOKEN))
    return Env(
        ShimClient("http://shim", TOKEN, transport=transport),
        ex,
        service,
        reconciler,
        transport,
        state_dir,
    )


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    e = await make_env(tmp_path)
    yield e
    await e.aclose()


async def wait_status(client: ShimClient, task_id: str, status: TaskStatus) -> None:
    await await_until(
        lambda: client.get_task(task_id),
        30,
        f"{task_id} to reach {status}",
        done=lambda info: info.status is status,
    )


async def test_auth(env: Env) -> None:
    assert (await env.client.healthcheck()).service == "tcl-shim"
    for token in ("wrong", ""):
        async with ShimClient("http://shim", token, transport=env.app) as bad:
            with pytest.raises(Unauthorized):
                await bad.host()
    async with httpx.AsyncClient(transport=env.app, base_url="http://shim") as raw:
        r = await raw.get("/api/tasks")
        assert r.status_code == 401 and r.json()["error"] == "unauthorized"


async def test_lifecycle_submit_run_exit_remove(env: Env) -> None:
    info = await env.client.submit_task(TaskSpec(id="t1", image="img", accelerators=2))
    assert info.status is TaskStatus.PENDING and info.accelerators == [0, 1]
    assert info.network == "bridge"  # shares the host
    await wait_status(env.client, "t1", TaskStatus.RUNNING)
    running = await env.client.get_task("t1")
    assert running.ports.runner == env.executor.alive["t1"]
    launch = env.executor.launches["t1"]
    assert [a.index for a in launch.accelerators] == [0, 1]
    host = await env.client.host()
    assert [(a.index, a.task_id, a.fake) for a in host.accelerators][:3] == [
        (0, "t1", True),
        (1, "t1", True),
        (2, None, True),
    ]
    with pytest.raises(TaskNotTerminated):
        await env.client.remove_task("t1")
    env.executor.exit("t1", 0)  # the runner exits by itself
    await wait_status(env.client, "t1", TaskStatus.TERMINATED)
    done = await env.client.get_task("t1")
    assert done.termination_reason is TerminationReason.DONE and done.exit_code == 0
    assert (await env.client.host()).accelerators[0].task_id is None  # freed
    await env.client.remove_task("t1")
    with pytest.raises(NotFound):
        await env.client.get_task("t1")
    assert not (env.state_dir / "tasks" / "t1").exists()


async def test_failed_exit_and_pull_progress(env: Env) -> None:
    await env.client.submit_task(TaskSpec(id="p1", image="pull/img"))
    await wait_status(env.client, "p1", TaskStatus.RUNNING)
    assert (await env.client.get_task("p1")).pull_progress == 1.0
    env.executor.exit("p1", 3)
    await wait_status(env.client, "p1", TaskStatus.TERMINATED)
    info = await env.client.get_task("p1")
    assert info.termination_reason is TerminationReason.FAILED and info.exit_code == 3


async def test_whole_host_gets_host_network(env: Env) -> None:
    info = await env.client.submit_task(TaskSpec(id="w", image="img", accelerators="all"))
    assert info.network == "host" and info.accelerators == [0, 1, 2, 3]
    multi = await env.client.submit_task(TaskSpec(id="m", image="img", multinode=True))
    assert multi.network == "host"


async def test_no_capacity_is_immediate_and_names_what_is_free(env: Env) -> None:
    await env.client.submit_task(TaskSpec(id="a", image="img", accelerators=3))
    t0 = time.perf_counter()
    with pytest.raises(NoCapacity) as e:
        await env.client.submit_task(TaskSpec(id="b", image="img", accelerators=2))
    assert time.perf_counter() - t0 < 10  # refused, not queued until something frees
    assert e.value.free == [3] and "free: [3]" in e.value.detail
    with pytest.raises(NotFound):
        await env.client.get_task("b")  # nothing recorded for a refused task


async def test_terminate_is_repeatable_and_keeps_the_first_reason(env: Env) -> None:
    await env.client.submit_task(TaskSpec(id="t", image="img", accelerators=1))
    await wait_status(env.client, "t", TaskStatus.RUNNING)
    first, second = await asyncio.gather(
        env.client.terminate_task("t", TerminationReason.MAX_DURATION, "too long"),
        env.client.terminate_task("t", TerminationReason.STOPPED_BY_USER, "user"),
    )
    assert first.termination_reason is TerminationReason.MAX_DURATION
    assert second.termination_reason is TerminationReason.MAX_DURATION
    again = await env.client.terminate_task("t", TerminationReason.FAILED)
    assert again.termination_reason is TerminationReason.MAX_DURATION
    assert again.message == "too long" and again.exit_code == 143
    assert env.executor.stops == ["t"]


async def test_preemption_terminates_every_live_task_as_preempted(env: Env) -> None:
    await env.client.submit_task(TaskSpec(id="a", image="img", accelerators=1))
    await env.client.submit_task(TaskSpec(id="b", image="img", accelerators=1))
    await wait_status(env.client, "a", TaskStatus.RUNNING)
    await wait_status(env.client, "b", TaskStatus.RUNNING)
    await env.client.terminate_task("b")  # already over: not notified again
    notified = await env.client.preempt(PreemptionNotice(message="spot VM preempted"))
    assert [t.id for t in notified] == ["a"]
    await wait_status(env.client, "a", TaskStatus.TERMINATED)
    a = await env.client.get_task("a")
    assert a.termination_reason is TerminationReason.PREEMPTED
    assert a.message == "spot VM preempted"
    b = await env.client.get_task("b")
    assert b.termination_reason is TerminationReason.STOPPED_BY_USER
    assert await env.client.preempt() == []


async def test_a_host_being_preempted_takes_no_new_task(env: Env) -> None:
    await env.client.preempt(PreemptionNotice(message="spot VM preempted", grace_s=60))
    # a run placed again after its preemption goes elsewhere, not onto the host going away
    with pytest.raises(NoCapacity) as e:
        await env.client.submit_task(TaskSpec(id="late", image="img", accelerators=1))
    assert "being preempted (spot VM preempted)" in e.value.detail


async def test_a_host_still_up_after_its_preemption_grace_takes_work_again(env: Env) -> None:
    await env.client.preempt(PreemptionNotice(grace_s=0.2))
    async with asyncio.timeout(30):
        while True:
            try:
                await env.client.submit_task(TaskSpec(id="later", image="img", accelerators=1))
                break
            except NoCapacity:
                await asyncio.sleep(0.05)  # still within the grace


async def test_terminate_while_starting(env: Env) -> None:
    env.executor.start_delay_s = 5
    await env.client.submit_task(TaskSpec(id="slow", image="img", accelerators=1))
    await wait_status(env.client, "slow", TaskStatus.CREATING)
    info = await env.client.terminate_task("slow")
    assert info.status is TaskStatus.TERMINATED and info.accelerators == [0]
    assert (await env.client.host()).accelerators[0].task_id is None


async def test_bad_input(env: Env) -> None:
    async with httpx.AsyncClient(
        transport=env.app, base_url="http://shim", headers={"Authorization": f"Bearer {TOKEN}"}
    ) as raw:
        r = await raw.post(
            "/api/tasks",
            json={
                "id": "x",
                "image": "i",
                "accelerators": -1,
                "registry_auth": {"username": "u", "password": 7},
            },
        )
        assert r.status_code == 422
        body = r.json()
        assert body["error"] == "invalid_request"
        fields = {d["field"] for d in body["detail"]}
        assert "accelerators" in fields
        assert "registry_auth.password" in fields
        assert "7" not in str([d.get("input") for d in body["detail"]])  # input never echoed
        r = await raw.post("/api/tasks", json={"id": "bad id!", "image": "i"})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "id"
        r = await raw.post("/api/tasks", json={"id": "y", "image": "i", "colour": "red"})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "colour"
    with pytest.raises(BadRequest, match="accelerators"):
        await env.client.submit_task(TaskSpec(id="z", image="i", accelerators=[7]))
    with pytest.raises(BadRequest, match="image"):
        await env.client.submit_task(TaskSpec(id="z", image=""))
    with pytest.raises(ExecutorUnavailable, match="process"):
        await env.client.submit_task(TaskSpec(id="z", image="i", executor=ExecutorKind.PROCESS))
    with pytest.raises(NotFound):
        await env.client.terminate_task("nope")
    with pytest.raises(NotFound):
        await env.client.remove_task("nope")


async def test_duplicate_and_image_error(env: Env) -> None:
    await env.client.submit_task(TaskSpec(id="d", image="missing/img", accelerators=1))
    with pytest.raises(TaskExists):
        await env.client.submit_task(TaskSpec(id="d", image="img"))
    await wait_status(env.client, "d", TaskStatus.TERMINATED)
    info = await env.client.get_task("d")
    assert info.termination_reason is TerminationReason.IMAGE_ERROR
    assert "missing/img not found" in info.message
    assert (await env.client.host()).accelerators[0].task_id is None


async def test_restart_adopts_running_and_marks_vanished(tmp_path: Path) -> None:
    e1 = await make_env(tmp_path)
    await e1.client.submit_task(TaskSpec(id="keep", image="img", accelerators=2))
    await e1.client.submit_task(TaskSpec(id="gone", image="img", accelerators=1))
    await wait_status(e1.client, "keep", TaskStatus.RUNNING)
    await wait_status(e1.client, "gone", TaskStatus.RUNNING)
    port = (await e1.client.get_task("keep")).ports.runner
    await e1.reconciler.close()
    await e1.service.close()
    # "Restart": a new service on the same state dir, with the same workloads alive except one.
    e2 = await make_env(tmp_path, alive={"keep": port or 0, "orphan": 1})
    try:
        keep = await e2.client.get_task("keep")
        assert keep.status is TaskStatus.RUNNING and keep.accelerators == [0, 1]
        assert keep.ports.runner == port
        gone = await e2.client.get_task("gone")
        assert gone.termination_reason is TerminationReason.VANISHED
        assert "orphan" not in e2.executor.alive  # orphan removed
        with pytest.raises(NoCapacity):  # the adopted task still holds its accelerators
            await e2.client.submit_task(TaskSpec(id="n", image="img", accelerators=3))
    finally:
        await e2.reconciler.close()
        await e2.service.close()
        await e2.client.aclose()
        await e1.client.aclose()


async def test_client_translates_transport_errors() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    async with ShimClient("http://127.0.0.1:1", "t", transport=httpx.MockTransport(refuse)) as c:
        with pytest.raises(ShimUnavailable, match="cannot reach"):
            await c.healthcheck()


async def test_the_reconcile_loop_evicts_code_but_not_a_running_tasks(tmp_path: Path) -> None:
    """The code-cache eviction (run in a thread from the reconcile loop every N passes) keeps
    the tree of a running task."""
    from tcl.shim.codegc import CodeGc

    e = await make_env(tmp_path / "state")
    trees = tmp_path / "state" / "code-cache" / "trees"
    used, idle = "a" * 64, "b" * 64
    for sha in (used, idle):
        (trees / sha).mkdir(parents=True)
        (trees / sha / "f").write_bytes(b"x" * 1000)
        os.utime(trees / sha, (100.0, 100.0))
    e.reconciler.code_gc = CodeGc(trees, None, max_bytes=1000, min_age_s=0)
    try:
        await e.client.submit_task(TaskSpec(id="t1", image="img", code_sha256=used))
        await wait_status(e.client, "t1", TaskStatus.RUNNING)
        assert e.reconciler.code_in_use() == {used}
        gc = e.reconciler.start_code_gc() or e.reconciler._gc_task  # or the loop's, running
        assert gc is not None
        await gc
        assert (trees / used).exists() and not (trees / idle).exists()
    finally:
        await e.reconciler.close()
        await e.service.close()
        await e.client.aclose()


async def test_a_client_retired_meanwhile_finishes_the_calls_in_flight() -> None:
    """A reset after one caller's dropped connection retires the shared client: another
    caller's call in flight on it still gets its answer (closing it failed that call: a
    placement's undo raised and leaked a GPU); the client closes once that call ended."""
    arrived, answer = asyncio.Event(), asyncio.Event()
    body = HealthInfo(version="1").model_dump_json().encode()

    async def slow_shim(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        arrived.set()
        await answer.wait()
        head = f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len(body)}"
        writer.write(head.encode() + b"\r\n\r\n" + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(slow_shim, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        client = ShimClient(f"http://127.0.0.1:{port}", "t")
        call = asyncio.create_task(client.healthcheck())
        await arrived.wait()
        await client.retire()
        answer.set()
        assert (await call).version == "1"
        with pytest.raises(ShimUnavailable, match="reset meanwhile"):
            await client.healthcheck()  # closed now that nothing was in flight
