"""``tcl submit``: snapshot → record → solve → launch (next candidate on no_capacity) → start.

The steps report through a small :class:`Observer` (the CLI draws spinners and an upload bar
with it); nothing here prints.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tcl.control.agents import RunnerApi, ShimApi
from tcl.control.backends.base import Backend
from tcl.control.errors import (
    AgentError,
    NoCapacityError,
    NoPlacementError,
    SubmitCancelled,
    TclError,
)
from tcl.control.jobcheck import check_job_key, job_dirs
from tcl.control.paths import cache_dir
from tcl.control.placement import dump_placement
from tcl.control.service import Control
from tcl.control.shipping import Snapshot, snapshot
from tcl.control.solver import Request, Solution, solve
from tcl.control.sshconfig import public_key
from tcl.control.states import RunState
from tcl.control.submitted import SubmitResult
from tcl.runner.api import CodeRef, JobRef, JobSpec
from tcl.shim.api import ExecutorKind, TaskInfo, TaskSpec, TaskStatus, TerminationReason

TASK_START_TIMEOUT_S = 600.0  # image pulls can be slow
RUNNER_READY_TIMEOUT_S = 150.0  # beyond the shim's start grace for a runner (probe.py)
# Polls are one small request over an open forward; a container starts in ~0.3-0.5 s, so a
# coarse interval would add a large share of it to every submit.
POLL_INTERVAL_S = 0.02


class Observer(Protocol):
    def status(self, text: str) -> None: ...

    def progress(self, done: int, total: int) -> None: ...

    def note(self, text: str) -> None: ...  # one line the user should read (not a status)


class _Silent:
    def status(self, text: str) -> None:
        return None

    def progress(self, done: int, total: int) -> None:
        return None

    def note(self, text: str) -> None:
        return None


@dataclass(frozen=True)
class Submission:
    argv: list[str]  # empty for a ``tcl.jobs`` job: the runner runs its launcher
    name: str = ""
    chip: str | None = None
    chips: int = 0
    host: str | None = None
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict, repr=False)  # values: never stored
    cwd: Path = field(default_factory=Path.cwd)
    code_dir: Path | None = None  # ``--dir``: ship this directory (explicitly, even / or ~)
    max_duration_s: float | None = None
    job: JobRef | None = None  # a registered tcl.jobs job (key + config), instead of argv


async def submit(
    ctl: Control, sub: Submission, obs: Observer | None = None, check_job: bool = True
) -> SubmitResult:
    """``check_job=False``: the caller checked ``sub.job`` (the `tcl serve` daemon's client
    does, in the user's own environment, before handing the submit over)."""
    obs = obs or _Silent()
    if sub.job is not None and check_job:
        obs.status("checking the job key")
        note = await asyncio.to_thread(check_job_key, sub.job.key, *job_dirs(sub.cwd, sub.code_dir))
        if note:
            obs.note(note)
    obs.status("snapshotting code, finding hosts")
    req = Request(chip=sub.chip, chips=sub.chips, host=sub.host)
    # The solver's probes open the SSH connections while the code is hashed and the store's
    # module (SQLAlchemy) is imported: both would otherwise wait on each other's idle time.
    solving = asyncio.create_task(solve(ctl.cfg, req, ctl.probe))
    try:
        snap, _ = await asyncio.gather(
            asyncio.to_thread(
                snapshot,
                sub.code_dir or sub.cwd,
                cache_dir(),
                ctl.cfg.shipping.max_bytes,
                ctl.cfg.shipping.cache_max_bytes,
                explicit=sub.code_dir is not None,
            ),
            asyncio.to_thread(importlib.import_module, "tcl.control.store"),
        )
    except BaseException:
        await _cancel(solving)
        raise
    from tcl.control.store import new_run_id  # imported above, off the event loop

    if not snap.git:
        skipped = f"; skipped {snap.unreadable} unreadable" if snap.unreadable else ""
        obs.note(
            f"not in a git repository: shipping {snap.root} ({snap.files} files) "
            f"with .tclignore{skipped}"
        )

    run_id = new_run_id(sub.name)
    request = {
        "argv": sub.argv, "chip": sub.chip, "chips": sub.chips, "host": sub.host,
        "image": sub.image, "env": sub.env, "secret_names": sorted(sub.secrets),
        "job": sub.job.key if sub.job else None,
    }  # fmt: skip
    tried = _Tried()
    try:
        ctl.store.create_run(run_id, sub.name, request)
    except BaseException:
        await _cancel(solving)
        raise
    try:
        return await _place_and_start(ctl, sub, snap, run_id, req, solving, obs, tried)
    except BaseException as e:
        await _cancel(solving)
        cancelled = isinstance(e, KeyboardInterrupt | asyncio.CancelledError)
        run = ctl.store.get_run(run_id)
        if ctl.store.latest_attempt(run_id) is None:
            # Nothing was placed (nothing fits, no host reachable, interrupted before a
            # task ran): no run to show in `tcl ps`; the error says why.
            ctl.store.delete_run(run_id)
        else:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            state = RunState.TERMINATED if cancelled else RunState.FAILED
            ctl.store.set_state(run_id, state, message=msg)
        if isinstance(e, asyncio.CancelledError):
            # Ctrl-C: the task is terminated and partial uploads removed (above); say so.
            host = run.host or tried.host
            where = f"nothing left on {host}" if host else "nothing was placed"
            raise SubmitCancelled(f"cancelled; {where}") from None
        raise


@dataclass
class _Tried:
    """The host where this submit last created a task (named by a cancel's message)."""

    host: str | None = None


async def _cancel(task: asyncio.Task[Solution]) -> None:
    if task.done():
        if not task.cancelled():
            task.exception()  # retrieved: no "exception was never retrieved" warning
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


async def _place_and_start(
    ctl: Control, sub: Submission, snap: Snapshot, run_id: str, req: Request,
    solving: asyncio.Task[Solution], obs: Observer, tried: _Tried,
) -> SubmitResult:  # fmt: skip
    obs.status("finding hosts")
    sol = await solving
    order = ctl.cfg.ordered_hosts()
    first = order.index(sol.candidates[0].host) if sol.candidates else len(order)
    skipped = [(h, why) for h, why in sol.skipped if order.index(h) < first]
    for cand in sol.candidates:
        backend = ctl.backend(cand.host)
        attempt_no = 0
        task_id = f"{run_id}-{attempt_no}"
        spec = _task_spec(ctl, backend, sub, task_id, run_id, snap.sha256)
        if sub.image and backend.executor is not ExecutorKind.DOCKER:
            obs.note(
                f"warning: --image {sub.image} is ignored: {cand.host} runs jobs with the "
                f"{backend.executor.value} executor, not in a container"
            )
        obs.status(f"launching on {cand.host}")
        shim = await backend.shim()
        try:
            task = await shim.create_task(spec)
            tried.host = cand.host  # a task exists there: a cancel cleans it up
        except NoCapacityError as e:
            skipped.append((cand.host, f"no capacity at launch: {e}"))
            continue
        backend.prestage_code(
            snap, obs.progress
        )  # e.g. start the host's code hand-over during the start
        try:
            task = await _wait_task(backend, task, obs)
            if task.ports.runner is None or not task.runner_token:
                raise AgentError(
                    f"task {task.id} reports no runner port or token (upgrade the "
                    f"shim on {cand.host}: tcl host setup)"
                )
            ctl.store.set_state(run_id, RunState.PROVISIONING)
            ctl.store.set_placement(run_id, cand.host, backend.kind, snap.sha256)
            handle: dict[str, object] = {"task_id": task.id, "runner_port": task.ports.runner,
                                         "ssh_port": task.ports.ssh}  # fmt: skip
            placement = backend.placement()
            if placement is not None:  # reach the host again even once it leaves the config
                handle["placement"] = dump_placement(placement)
            att = ctl.store.add_attempt(run_id, cand.host, backend.kind, handle)
            sent = await _start_job(ctl, backend, sub, snap, task.ports.runner,
                                    task.runner_token, run_id, att.attempt, obs)  # fmt: skip
        except NoCapacityError as e:
            skipped.append((cand.host, f"no capacity at launch: {e}"))
            continue
        except BaseException:
            # Ctrl-C or a failure after the task exists: never leave it holding accelerators,
            # nor a partial upload on the host
            await asyncio.shield(_terminate_quietly(shim, task.id))
            await asyncio.shield(backend.discard_staged())
            raise
        ctl.store.set_state(run_id, RunState.RUNNING)
        ctl.store.update_attempt(run_id, att.attempt, state=RunState.RUNNING)
        return SubmitResult(
            run_id=run_id, name=sub.name, host=cand.host, backend=backend.kind, task_id=task.id,
            accelerators=task.accelerators, code_sha256=snap.sha256, code_bytes=snap.size,
            uploaded_bytes=sent, skipped=skipped, ssh=task.ports.ssh is not None,
        )  # fmt: skip
    raise NoPlacementError(f"nothing fits {req.describe()} at launch; hosts now:", skipped)


async def _start_job(
    ctl: Control, backend: Backend, sub: Submission, snap: Snapshot, runner_port: int,
    runner_token: str, run_id: str, attempt: int, obs: Observer,
) -> int:  # fmt: skip
    """Spec, code, run; return how many code bytes crossed the network."""
    runner = await backend.runner(runner_port, runner_token, run_id)
    try:
        obs.status("waiting for the runner")
        await _wait_runner(runner)
        spec_job = JobSpec(
            run_id=run_id, attempt=attempt, name=sub.name, argv=sub.argv or None,
            env={**_host_env(ctl, backend.name), **sub.env}, secrets=sub.secrets,
            code=CodeRef(sha256=snap.sha256, size=snap.size), cwd=job_cwd(sub.cwd, snap.root),
            max_duration_s=sub.max_duration_s, job=sub.job,
        )  # fmt: skip
        await runner.submit(spec_job)
        obs.status(f"shipping code ({snap.files} files)")
        sent = await backend.ship_code(snap, runner_port, runner_token, runner, obs.progress)
        obs.status("starting the job")
        await runner.run()
        return sent
    finally:
        await runner.aclose()


def job_cwd(cwd: Path, root: Path) -> str:
    """Where the job starts, relative to the shipped root: the submit's directory when it lies
    inside the snapshot (``cd sub && tcl submit`` runs in ``sub``), else the root."""
    try:
        rel = cwd.resolve().relative_to(root)
    except ValueError:
        return ""
    return "" if rel == Path() else rel.as_posix()


async def _terminate_quietly(shim: ShimApi, task_id: str) -> None:
    with contextlib.suppress(TclError):
        await shim.terminate_task(task_id, TerminationReason.FAILED, "submit did not finish")


def _host_env(ctl: Control, host: str) -> dict[str, str]:
    return dict(ctl.cfg.hosts[host].env)


def _task_spec(
    ctl: Control, backend: Backend, sub: Submission, task_id: str, run_id: str, code_sha256: str
) -> TaskSpec:
    image = sub.image or ctl.cfg.hosts[backend.name].image or ""
    if backend.executor is ExecutorKind.DOCKER and not image:
        raise TclError(
            f"host {backend.name} runs jobs in docker: set `image:` for it in the config "
            "or pass --image (an image with tcl-runner, see Dockerfile.runner)"
        )
    return TaskSpec(
        id=task_id, name=sub.name or run_id, image=image, executor=backend.executor,
        accelerators=sub.chips, ssh_keys=[public_key()], code_sha256=code_sha256,
    )  # fmt: skip


async def _wait_task(backend: Backend, task: TaskInfo, obs: Observer) -> TaskInfo:
    shim = await backend.shim()
    deadline = time.monotonic() + TASK_START_TIMEOUT_S
    while True:
        if task.status is TaskStatus.RUNNING and task.ports.runner is not None:
            return task
        if task.status is TaskStatus.TERMINATED:
            if task.termination_reason is TerminationReason.NO_CAPACITY:
                raise NoCapacityError(task.message or "no capacity")
            reason = task.termination_reason.value if task.termination_reason else "terminated"
            raise AgentError(f"task {task.id} on {backend.name} failed: {reason}: {task.message}")
        if time.monotonic() > deadline:
            raise AgentError(f"task {task.id} did not start within {TASK_START_TIMEOUT_S:.0f} s")
        detail = f" {task.pull_progress:.0%}" if task.pull_progress is not None else ""
        obs.status(f"{backend.name}: {task.status.value}{detail}")
        await asyncio.sleep(POLL_INTERVAL_S)
        task = await shim.get_task(task.id)


async def _wait_runner(runner: RunnerApi) -> None:
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
