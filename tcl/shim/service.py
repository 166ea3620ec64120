"""The task service: submit, terminate, remove, and each task's lifecycle up to ``running``.

Submission is synchronous up to the allocation (so ``no_capacity`` is answered at once); the rest
(prepare → pull → create → start) runs as an asyncio task. Exits, restarts and leftovers are the
reconcile loop's business (``tcl.shim.reconcile``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from tcl.atomic import write_atomic
from tcl.shim.allocator import Allocator
from tcl.shim.api import (
    Accelerator,
    ClusterFs,
    ExecutorKind,
    HostInfo,
    Mount,
    NetworkMode,
    Ports,
    PreemptionNotice,
    TaskInfo,
    TaskSpec,
    TaskStatus,
    TerminateRequest,
    TerminationReason,
)
from tcl.shim.clusterfs import ClusterMounts
from tcl.shim.errors import (
    BadRequest,
    ExecutorUnavailable,
    IllegalTransition,
    ImageError,
    NoCapacity,
    ShimError,
    TaskExists,
    TaskNotTerminated,
)
from tcl.shim.executors.base import Executor, Launch
from tcl.shim.exiting import ExitingRunners
from tcl.shim.inventory import Inventory
from tcl.shim.network import choose_network, is_whole_host
from tcl.shim.probe import stop_job
from tcl.shim.startwait import StartWaits
from tcl.shim.states import is_active
from tcl.shim.store import TaskRecord, TaskStore, new_record
from tcl.tokenfile import new_token

log = logging.getLogger(__name__)

PROGRESS_STEP = 0.01  # persist pull progress in steps of 1 %


@dataclass
class TaskService:
    store: TaskStore
    inventory: Inventory
    executors: dict[ExecutorKind, Executor]
    default_executor: ExecutorKind
    mounts: ClusterMounts
    allocator: Allocator = field(init=False)
    busy_outside: set[int] = field(default_factory=set)
    _lifecycles: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _terminating: dict[str, asyncio.Future[TaskInfo]] = field(default_factory=dict)
    # terminated tasks whose runner is still exiting (their job had ended: chips freed at once)
    _exiting: ExitingRunners = field(default_factory=ExitingRunners)
    _submitting: set[str] = field(default_factory=set)
    _preempting: set[asyncio.Task[None]] = field(default_factory=set)
    # a preemption notice: the host is going away, so no new task until its grace ran out
    _going_away_until: float = 0.0
    _going_away_why: str = ""
    _starts: StartWaits = field(default_factory=StartWaits)

    def __post_init__(self) -> None:
        self.allocator = Allocator(
            [a.index for a in self.inventory.accelerators], self.inventory.topology
        )
        self.mounts.adopt(
            (r.info.id, r.spec.cluster_fs)
            for r in self.store.records()
            if r.spec.cluster_fs is not None and is_active(r.info.status)
        )

    @property
    def host_vendor(self) -> str | None:
        accels = self.inventory.accelerators
        return accels[0].vendor if accels else None

    # -- reads --------------------------------------------------------------------------------
    def host_info(self) -> HostInfo:
        held = self.allocator.held()
        accels = [
            a.model_copy(
                update={"task_id": held.get(a.index), "busy_outside": a.index in self.busy_outside}
            )
            for a in self.inventory.accelerators
        ]
        return HostInfo(
            hostname=socket.gethostname(),
            cpus=os.cpu_count() or 1,
            memory_bytes=psutil.virtual_memory().total,
            accelerators=accels,
            executors=sorted(self.executors),
        )

    def get(self, task_id: str) -> TaskInfo:
        return self.store.get(task_id).info

    async def wait_started(self, task_id: str, wait_s: float) -> TaskInfo:
        """The task once it runs or ended, or after ``wait_s`` (:mod:`tcl.shim.startwait`)."""
        return await self._starts.wait(self.get, task_id, wait_s)

    def list_tasks(self) -> list[TaskInfo]:
        return sorted((r.info for r in self.store.records()), key=lambda i: i.created_at)

    @property
    def submitting(self) -> set[str]:
        """Ids being recorded right now (not yet in the store)."""
        return set(self._submitting)

    def is_busy(self, task_id: str) -> bool:
        """True while this shim's own code (submit, lifecycle or terminate) is moving the
        task: from the moment its record exists (a submit recording it) on."""
        lc = self._lifecycles.get(task_id)
        moving = (
            task_id in self._submitting or task_id in self._terminating or task_id in self._exiting
        )
        return (lc is not None and not lc.done()) or moving

    # -- submit -------------------------------------------------------------------------------
    async def submit(self, spec: TaskSpec) -> TaskInfo:
        """Validate, allocate and record the task, then start its lifecycle.

        The capacity check and the allocation run without awaiting between them, so they are
        atomic with respect to other requests and a refusal is answered at once (a cluster
        filesystem is mounted before them: a host that cannot mount it allocates nothing).
        Only the durable write (task.json, fsync) is done in a thread, off the event loop."""
        kind = spec.executor or self.default_executor
        executor = self.executors.get(kind)
        if executor is None:
            raise ExecutorUnavailable(
                f"executor: {kind} is not available on this host (available: "
                f"{', '.join(sorted(self.executors)) or 'none'})"
            )
        if spec.id in self.store or spec.id in self._submitting:
            raise TaskExists(f"task {spec.id!r} already exists")
        left_s = self._going_away_until - time.monotonic()
        if left_s > 0:  # a run placed here now would be preempted again within seconds
            raise NoCapacity(
                f"this host is being preempted ({self._going_away_why}): no new task for "
                f"{left_s:.0f} s",
                [],
            )
        if kind is ExecutorKind.DOCKER and not spec.image:
            raise BadRequest("image: required by the docker executor")
        for i, m in enumerate(spec.mounts):
            if not (m.source.startswith("/") and m.target.startswith("/")):
                raise BadRequest(f"mounts.{i}: source and target must be absolute paths")
        if spec.cluster_fs is not None:
            spec = await self._with_cluster_fs(spec, spec.cluster_fs, kind)
        try:
            if spec.id in self.store or spec.id in self._submitting:  # while it mounted
                raise TaskExists(f"task {spec.id!r} already exists")
            indices = self.allocator.allocate(spec.id, spec.accelerators, self.busy_outside)
        except BaseException:
            self.mounts.release(spec.id)
            raise
        self._submitting.add(spec.id)
        try:
            network = NetworkMode.HOST
            if kind is ExecutorKind.DOCKER:
                whole = is_whole_host(
                    len(indices), len(self.allocator.indices), spec.accelerators == "all"
                )
                network = choose_network(spec.network, multinode=spec.multinode, whole_host=whole)
            record = await asyncio.to_thread(
                self.store.add,
                new_record(
                    spec,
                    {
                        "accelerators": indices,
                        "network": network,
                        "executor": kind,
                        "runner_token": new_token(),
                    },
                ),
            )
        except BaseException:
            self.allocator.release(spec.id)
            self.mounts.release(spec.id)
            raise
        finally:
            self._submitting.discard(spec.id)
        self._lifecycles[spec.id] = asyncio.create_task(
            self._run(spec, executor), name=f"task-{spec.id}"
        )
        return record.info

    async def _with_cluster_fs(self, spec: TaskSpec, fs: ClusterFs, kind: ExecutorKind) -> TaskSpec:
        """Mount the cluster's filesystem (counted for this task) before anything is allocated:
        a host that cannot mount it starts nothing. A container gets the mount bound in."""
        await self.mounts.acquire(spec.id, fs)
        if kind is not ExecutorKind.DOCKER:
            return spec
        bound = Mount(source=fs.mount_point, target=fs.mount_point)
        return spec.model_copy(update={"mounts": [*spec.mounts, bound]})

    def _accelerators(self, indices: list[int]) -> list[Accelerator]:
        wanted: set[int] = set(indices)
        return [a for a in self.inventory.accelerators if a.index in wanted]

    async def _run(self, spec: TaskSpec, executor: Executor) -> None:
        """pending → preparing → [pulling →] creating → running, or terminated with a reason."""
        task_id = spec.id
        try:
            rec = await self._update(task_id, status=TaskStatus.PREPARING)
            launch = Launch(
                spec=spec,
                accelerators=self._accelerators(rec.info.accelerators),
                network=rec.info.network,
                task_dir=self.store.task_dir(task_id),
                host_vendor=self.host_vendor,
                host_accelerators=len(self.inventory.accelerators),
            )
            assert rec.info.runner_token is not None
            await asyncio.to_thread(
                write_atomic, launch.runner_token_file, rec.info.runner_token.encode(), 0o600
            )
            last = [-1.0]

            def progress(fraction: float) -> None:  # called from the pull thread
                if fraction - last[0] >= PROGRESS_STEP or fraction >= 1.0 > last[0]:
                    last[0] = fraction
                    self.store.update(task_id, status=TaskStatus.PULLING, pull_progress=fraction)

            await executor.prepare(launch, progress)
            await self._update(task_id, status=TaskStatus.CREATING)
            started = await executor.start(launch)
            await self._update(
                task_id, status=TaskStatus.RUNNING, handle=started.handle, ports=started.ports
            )
        except asyncio.CancelledError:
            raise  # terminate() cancelled us and finishes the task itself
        except IllegalTransition:
            log.info("task %s was terminated while starting", task_id)
        except ImageError as e:
            await self.finish(task_id, TerminationReason.IMAGE_ERROR, e.detail)
        except ShimError as e:
            await self.finish(task_id, TerminationReason.CONTAINER_ERROR, e.detail)
        except Exception as e:
            log.exception("task %s failed to start", task_id)
            await self.finish(
                task_id, TerminationReason.CONTAINER_ERROR, f"{type(e).__name__}: {e}"
            )

    async def _update(self, task_id: str, **changes: Any) -> TaskRecord:
        """The store's guarded writer, run in a thread (it fsyncs) so the loop stays free."""
        try:
            return await asyncio.to_thread(functools.partial(self.store.update, task_id, **changes))
        finally:
            self._starts.notify(task_id)

    async def finish(
        self,
        task_id: str,
        reason: TerminationReason,
        message: str = "",
        exit_code: int | None = None,
        job_ended: bool | None = None,
    ) -> TaskInfo:
        """The one way a task ends: record the outcome (first reason wins), free its chips.

        ``job_ended``: the job ended on its own and the runner lingers to serve its logs.
        The durable write runs in a thread (it fsyncs), off the loop. The chips are released
        in that thread right after the write commits, under the store's lock: never while the
        task still looks alive on disk, and never after a reader could see it terminated (a
        client that sees "terminated" and submits again must get the chips; the allocator has
        its own lock)."""
        rec = await self._update(
            task_id,
            status=TaskStatus.TERMINATED,
            reason=reason,
            message=message,
            exit_code=exit_code,
            job_ended=job_ended,
            on_commit=functools.partial(self.allocator.release, task_id),
        )
        self.mounts.release(task_id)
        return rec.info

    # -- terminate / remove -------------------------------------------------------------------
    async def terminate(self, task_id: str, req: TerminateRequest) -> TaskInfo:
        rec = self.store.get(task_id)
        if rec.info.status is TaskStatus.TERMINATED:
            return await self.finish(task_id, req.reason, req.message)  # first reason kept
        pending = self._terminating.get(task_id)
        if pending is not None:  # a terminate is under way: its reason is the first one
            await asyncio.shield(pending)
            return await self.finish(task_id, req.reason, req.message)
        fut: asyncio.Future[TaskInfo] = asyncio.get_running_loop().create_future()
        self._terminating[task_id] = fut
        try:
            lifecycle = self._lifecycles.pop(task_id, None)
            if lifecycle is not None and not lifecycle.done():
                lifecycle.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await lifecycle
            rec = self.store.get(task_id)
            executor = self.executors[rec.info.executor]
            exit_code = None
            message = req.message
            info = rec.info
            if info.status is TaskStatus.RUNNING and info.ports.runner and info.runner_token:
                # Why it is being stopped shows before the job's last events do: a client that
                # sees the job end asks the task why (a preempted run is placed again).
                await self._update(task_id, termination_reason=req.reason)
                # The runner stops the job itself first (its signal, its grace, its final
                # events); the workload is stopped after that, or regardless if it won't answer.
                stopped = await stop_job(info.ports.runner, info.runner_token, req.timeout_s)
                if stopped.before:
                    info = await self._end_lingering(rec, req, stopped.exit_code)
                    fut.set_result(info)
                    return info
            try:
                exit_code = await executor.stop(task_id, rec.handle, req.timeout_s)
            except ShimError as e:
                message = f"{message} (stop failed: {e.detail})".strip()
            info = await self.finish(task_id, req.reason, message, exit_code)
            fut.set_result(info)
            return info
        except BaseException as e:
            fut.set_exception(e)
            fut.exception()  # mark retrieved
            raise
        finally:
            del self._terminating[task_id]

    async def _end_lingering(
        self, rec: TaskRecord, req: TerminateRequest, exit_code: int | None
    ) -> TaskInfo:
        """A task whose job had ended on its own (its runner serves the logs): what the job
        left running is ended and its chips freed now, as the reconcile loop does for an ended
        job; the runner's own exit (a quarter second, more for a container) goes on in the
        background, so whoever terminated it (a sweep's next entry) gets the chips at once."""
        task_id = rec.info.id
        executor = self.executors[rec.info.executor]
        try:
            await executor.end_job_leftovers(task_id, rec.handle)
        except ShimError as e:
            log.warning("task %s: cannot end what the job left running: %s", task_id, e.detail)
        info = await self.finish(task_id, req.reason, req.message, exit_code, job_ended=True)
        self._exiting.stop(executor, task_id, rec.handle, req.timeout_s)
        return info

    def preempt(self, notice: PreemptionNotice) -> list[TaskInfo]:
        """Terminate every live task as ``preempted``, in the background; return them.

        Each runner is asked to stop its job (SIGTERM: ``tcl.jobs`` checkpoints and exits), the
        usual terminate path. The caller (the VM's shutdown-script) does not wait on the answer:
        it polls the task list until nothing runs, within the time the VM has left. New tasks
        are refused (``no_capacity``) for ``grace_s``: a run placed again goes elsewhere."""
        req = TerminateRequest(
            reason=TerminationReason.PREEMPTED, message=notice.message, timeout_s=notice.grace_s
        )
        self._going_away_until = time.monotonic() + notice.grace_s
        self._going_away_why = notice.message
        notified = [r.info for r in self.store.records() if is_active(r.info.status)]
        for info in notified:
            job = asyncio.create_task(self._preempt_one(info.id, req))
            self._preempting.add(job)  # a reference, so the task is not garbage-collected
            job.add_done_callback(self._preempting.discard)
        return notified

    async def _preempt_one(self, task_id: str, req: TerminateRequest) -> None:
        try:
            await self.terminate(task_id, req)
        except Exception:  # nobody awaits this task: the log is where a failure shows
            log.exception("preempting task %s failed", task_id)

    async def remove(self, task_id: str) -> None:
        rec = self.store.get(task_id)
        if rec.info.status is not TaskStatus.TERMINATED or task_id in self._terminating:
            raise TaskNotTerminated(
                f"task {task_id!r} is {rec.info.status}: terminate it before removing it"
            )
        executor = self.executors[rec.info.executor]
        if task_id in self._exiting:
            # its runner is still exiting: the record goes now, the workload and the files
            # once it has exited (never on the caller's time)
            trash = await asyncio.to_thread(self.store.remove, task_id)
            self._lifecycles.pop(task_id, None)
            self._exiting.remove(executor, task_id, rec.handle, self.store, trash)
            return
        await executor.remove(task_id, rec.handle)
        trash = await asyncio.to_thread(self.store.remove, task_id)
        self._lifecycles.pop(task_id, None)
        if trash is not None:
            # A big task dir takes seconds to delete: never on the loop. The task is already
            # gone from the store, so its id may be reused meanwhile.
            await asyncio.to_thread(self.store.discard, trash)

    async def expire(self, task_id: str) -> None:
        """Remove a terminated task's workload and files but keep its record (the outcome a
        workstation that never fetched the logs still asks for); ``remove`` deletes it later."""
        rec = self.store.get(task_id)
        if rec.info.status is not TaskStatus.TERMINATED or self.is_busy(task_id):
            raise TaskNotTerminated(f"task {task_id!r} is {rec.info.status}: not expired")
        await self.executors[rec.info.executor].remove(task_id, rec.handle)
        await asyncio.to_thread(self.store.prune, task_id)
        await self._update(task_id, ports=Ports(), runner_token=None, workload_removed=True)

    async def open(self) -> None:
        for executor in self.executors.values():
            await executor.open()

    async def close(self) -> None:
        """Stop the shim's own coroutines; the tasks' containers and processes keep running
        (the executors' warm runners, bound to no task, end)."""
        await self.mounts.close()
        for executor in self.executors.values():
            await executor.close()
        await self._exiting.wait(10.0)  # runners exiting (a quarter second each)
        for lc in list(self._lifecycles.values()):
            lc.cancel()
        for lc in list(self._lifecycles.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await lc
