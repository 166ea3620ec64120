"""The reconcile loop: compare what the store says with what the executors see, and fix it.

Run once at start (after a restart this adopts still-running containers and processes, with
their accelerators and ports) and then every ``interval_s``:
- an active task whose workload is alive is (re)marked ``running`` with its ports;
- an active task whose workload exited ends ``done`` (exit 0) or ``failed``;
- an active task whose workload vanished ends ``vanished`` (e.g. removed while the shim was down);
- a running task whose runner says the job ended ends ``done``/``failed`` at once, its
  accelerators freed and the job's leftovers ended; the runner lingers to serve the logs;
- a running task whose runner stopped answering for ``silence_limit_s`` is terminated;
- a terminated task whose workload is still alive has it stopped (unless its runner lingers);
- a task terminated longer than ``retention_s`` ago expires: its runner or container and its
  files are removed, its record (the outcome) is kept for ``record_retention_s``, then deleted;
- workloads carrying this shim's marks but no known task are removed (orphans);
- task dirs without a usable task.json are removed (stray dirs, at start).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import shutil
import time
from pathlib import Path

from tcl.atomic import write_atomic
from tcl.shim.api import ExecutorKind, TaskStatus, TerminateRequest, TerminationReason
from tcl.shim.codegc import CodeGc
from tcl.shim.derivedgc import DerivedGc
from tcl.shim.errors import ShimError
from tcl.shim.executors.base import Liveness, Observed
from tcl.shim.inventory import BUSY_OUTSIDE_MIB, outside_usage_mib
from tcl.shim.probe import JobState, ProbeResult, RunnerProbe
from tcl.shim.service import TaskService
from tcl.shim.store import Handle, TaskRecord

log = logging.getLogger(__name__)

LEFTOVER_STOP_TIMEOUT_S = 5.0
# Every this many passes: leftovers of terminated tasks (cancel races) and orphans are rare,
# and looking for them costs a process-table scan or a container listing.
TERMINATED_CHECK_EVERY = 10
OUTSIDE_USAGE_EVERY_S = 10.0
CODE_GC_EVERY = 60  # passes between code-cache evictions (a directory walk, in a thread)


_JOB_REASON = {
    "succeeded": TerminationReason.DONE,
    "failed": TerminationReason.FAILED,
    "terminated": TerminationReason.STOPPED_BY_USER,
}


def _log_gc_failure(task: asyncio.Task[list[Path]]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("code cache eviction failed: %s", task.exception())


class Reconciler:
    def __init__(
        self,
        service: TaskService,
        interval_s: float,
        retention_s: float = 600.0,
        silence_limit_s: float = 30.0,
        record_retention_s: float = 7 * 24 * 3600.0,
        code_gc: CodeGc | None = None,
        derived_gc: DerivedGc | None = None,
    ) -> None:
        self.service = service
        self.code_gc = code_gc
        self.derived_gc = derived_gc
        self._gc_task: asyncio.Task[list[Path]] | None = None
        self.interval_s = interval_s
        self.retention_s = retention_s
        self.record_retention_s = record_retention_s
        self.probe = RunnerProbe(silence_limit_s)
        self._loop_task: asyncio.Task[None] | None = None
        self._usage_checked_at = 0.0
        self._passes = 0

    async def start(self) -> None:
        """Load task.json files, drop stray dirs, re-hold accelerators, reconcile, loop."""
        if self._loop_task is not None:
            return
        store = self.service.store
        for stray in store.load():
            log.warning("removing stray task dir %s", stray)
            shutil.rmtree(stray, ignore_errors=True)
        for rec in store.records():
            if rec.info.status is not TaskStatus.TERMINATED:
                self.service.allocator.restore(rec.info.id, rec.info.accelerators)
        await self.refresh_outside_usage()
        await self.reconcile_once(after_restart=True)
        self._loop_task = asyncio.create_task(self._loop(), name="shim-reconcile")

    async def close(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
        if self._gc_task is not None:
            with contextlib.suppress(Exception):
                await self._gc_task  # a thread cannot be cancelled: let it finish
            self._gc_task = None
        await self.probe.aclose()

    def code_in_use(self) -> set[str]:
        """The code of every task whose workload or files still exist."""
        return {
            r.spec.code_sha256
            for r in self.service.store.records()
            if r.spec.code_sha256 is not None and not r.workload_removed
        }

    def start_code_gc(self) -> asyncio.Task[list[Path]] | None:
        """Evict least recently used code (trees, tarballs), and what jobs derived from it
        (compiled programs, project environments), in a thread; one at a time."""
        if self.code_gc is None or (self._gc_task is not None and not self._gc_task.done()):
            return None
        code_gc, derived, in_use = self.code_gc, self.derived_gc, self.code_in_use()

        def collect() -> list[Path]:
            return [*code_gc.collect(in_use), *(derived.collect() if derived else [])]

        self._gc_task = asyncio.create_task(asyncio.to_thread(collect), name="shim-code-gc")
        self._gc_task.add_done_callback(_log_gc_failure)
        return self._gc_task

    async def _loop(self) -> None:
        loop_passes = 0
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.reconcile_once()
                if loop_passes % CODE_GC_EVERY == 0:  # the first pass, then every N
                    self.start_code_gc()
                loop_passes += 1
                if time.monotonic() - self._usage_checked_at > OUTSIDE_USAGE_EVERY_S:
                    await self.refresh_outside_usage()
            except Exception:
                log.exception("reconcile pass failed; retrying in %.1f s", self.interval_s)

    async def refresh_outside_usage(self) -> None:
        """GPUs used ≥ 100 MiB by processes outside tcl count as busy (not for fakes)."""
        self._usage_checked_at = time.monotonic()
        inventory = self.service.inventory
        if self.service.host_vendor != "nvidia":
            return
        used = await asyncio.to_thread(outside_usage_mib)
        held = self.service.allocator.held()
        self.service.busy_outside = {
            a.index
            for a in inventory.accelerators
            if a.index not in held and used.get(a.uuid, 0) >= BUSY_OUTSIDE_MIB
        }

    async def reconcile_once(self, after_restart: bool = False) -> None:
        svc = self.service
        check_terminated = after_restart or self._passes % TERMINATED_CHECK_EVERY == 0
        self._passes += 1
        records = [
            r
            for r in svc.store.records()
            if check_terminated or r.info.status is not TaskStatus.TERMINATED
        ]
        for kind, executor in svc.executors.items():
            mine = [r for r in records if r.info.executor is kind and not svc.is_busy(r.info.id)]
            handles: dict[str, Handle] = {r.info.id: r.handle for r in mine}
            try:
                observed = await executor.observe(handles)
            except ShimError as e:
                log.warning("cannot observe %s tasks: %s", kind, e.detail)
                continue
            for rec in mine:
                obs = observed.get(rec.info.id)
                if obs is not None and not svc.is_busy(rec.info.id):
                    await self._settle(rec, obs, after_restart)
            if not check_terminated:
                continue  # orphans are rare: look for them at start and every few passes
            known = {r.info.id for r in svc.store.records()} | svc.submitting
            try:
                for name in await executor.orphans(known):
                    await executor.remove_orphan(name)
            except ShimError as e:
                log.warning("cannot clean up %s orphans: %s", kind, e.detail)
        for kind in {r.info.executor for r in records} - set(svc.executors):
            await self._executor_gone(kind, records)
        await self.check_jobs()
        if check_terminated:
            await self.remove_expired()

    async def check_jobs(self) -> None:
        """Free the accelerators of tasks whose job ended; end tasks whose runner went silent."""
        svc = self.service
        running = [
            r
            for r in svc.store.records()
            if r.info.status is TaskStatus.RUNNING
            and r.info.ports.runner is not None
            and not svc.is_busy(r.info.id)
        ]
        found = await self.probe.check((r.info.id, r.info.ports.runner or 0) for r in running)
        for rec in running:
            result = found[rec.info.id]
            if svc.is_busy(rec.info.id):
                continue
            if result.job is JobState.ENDED:
                await self._job_ended(rec, result)
            elif result.job is JobState.SILENT:
                log.warning(
                    "task %s: the runner has not answered for %.0f s: ending the task",
                    rec.info.id,
                    result.silent_s,
                )
                await svc.terminate(
                    rec.info.id,
                    TerminateRequest(
                        reason=TerminationReason.FAILED,
                        timeout_s=LEFTOVER_STOP_TIMEOUT_S,
                        message=f"the runner stopped answering for {result.silent_s:.0f} s",
                    ),
                )

    async def _job_ended(self, rec: TaskRecord, result: ProbeResult) -> None:
        svc, task_id = self.service, rec.info.id
        try:
            ended = await svc.executors[rec.info.executor].end_job_leftovers(task_id, rec.handle)
        except ShimError as e:
            log.warning("task %s: cannot end what the job left running: %s", task_id, e.detail)
            ended = 0
        reason = _JOB_REASON.get(result.runner_state, TerminationReason.FAILED)
        if reason is TerminationReason.STOPPED_BY_USER and result.started is False:
            reason = TerminationReason.NOT_STARTED  # stopped before its job ran: nothing ran
        code = "" if result.exit_code is None else f" (exit code {result.exit_code})"
        extra = f"; ended {ended} process(es) it left running" if ended else ""
        await svc.finish(
            task_id,
            reason,
            f"the job {result.runner_state}{code}{extra}",
            result.exit_code,
            job_ended=True,
        )
        log.info("task %s: job %s, accelerators freed", task_id, result.runner_state)

    async def remove_expired(self) -> None:
        """Expire tasks terminated longer than the retention (runner, container and files go,
        the record stays); delete records older than the record retention."""
        svc, now = self.service, time.time()
        for rec in svc.store.records():
            ended = rec.finished_at
            if (
                rec.info.status is not TaskStatus.TERMINATED
                or ended is None
                or now - ended < self.retention_s
                or svc.is_busy(rec.info.id)
            ):
                continue
            old_record = now - ended >= self.record_retention_s
            if rec.workload_removed and not old_record:
                continue
            log.info(
                "task %s: retention over, %s",
                rec.info.id,
                "deleting its record" if old_record else "removing its runner and files",
            )
            try:
                await (svc.remove if old_record else svc.expire)(rec.info.id)
            except ShimError as e:
                log.warning("cannot remove task %s: %s", rec.info.id, e.detail)

    async def _settle(self, rec: TaskRecord, obs: Observed, after_restart: bool) -> None:
        svc, info = self.service, rec.info
        task_id = info.id
        if info.status is TaskStatus.TERMINATED:
            if obs.liveness is Liveness.ALIVE and not rec.job_ended:
                log.info("task %s is terminated but its workload runs: stopping it", task_id)
                await svc.executors[info.executor].stop(
                    task_id, obs.handle or rec.handle, LEFTOVER_STOP_TIMEOUT_S
                )
            return
        if obs.liveness is Liveness.ALIVE:
            if info.status in (TaskStatus.CREATING, TaskStatus.RUNNING):
                ports = obs.ports if obs.ports.runner is not None else info.ports
                handle = obs.handle if obs.handle is not None else rec.handle
                if (
                    info.status is not TaskStatus.RUNNING
                    or ports != info.ports
                    or (handle != rec.handle)
                ):
                    svc.store.update(task_id, status=TaskStatus.RUNNING, ports=ports, handle=handle)
                    log.info("task %s adopted as running", task_id)
                return
            # Alive, but the shim died before it recorded the start: not a state we can resume.
            await svc.executors[info.executor].stop(
                task_id, obs.handle or rec.handle, LEFTOVER_STOP_TIMEOUT_S
            )
            await svc.finish(
                task_id,
                TerminationReason.VANISHED,
                f"the shim restarted while the task was {info.status}",
            )
            return
        if obs.liveness is Liveness.EXITED:
            code = obs.exit_code
            reason = TerminationReason.DONE if code == 0 else TerminationReason.FAILED
            message = obs.message or f"the runner exited with code {code}"
            await svc.finish(task_id, reason, message, code)
            return
        # Missing: before the workload existed (shim restart mid-start), or removed behind our back.
        if info.status in (TaskStatus.RUNNING, TaskStatus.CREATING) or after_restart:
            what = "while the shim was down" if after_restart else "behind the shim's back"
            await svc.finish(
                task_id,
                TerminationReason.VANISHED,
                f"{obs.message or 'the workload is gone'} ({what}; was {info.status})",
            )

    async def _executor_gone(self, kind: ExecutorKind, records: list[TaskRecord]) -> None:
        for rec in records:
            if rec.info.executor is kind and rec.info.status is not TaskStatus.TERMINATED:
                await self.service.finish(
                    rec.info.id,
                    TerminationReason.VANISHED,
                    f"the {kind} executor is not available after a restart",
                )


def ensure_instance_id(state_dir: Path) -> str:
    """A random id for this shim's state dir; marks its containers and processes."""
    path = state_dir / "instance_id"
    try:
        value = path.read_text().strip()
        if value:
            return value
    except FileNotFoundError:
        pass
    value = secrets.token_hex(4)
    write_atomic(path, f"{value}\n".encode())
    return value
