"""``tcl submit``: snapshot → record → solve → launch (next candidate on no_capacity) → start.

The steps report through a small :class:`Observer` (the CLI draws spinners and an upload bar
with it); nothing here prints. Choosing the host and launching there is
:mod:`tcl.control.lifecycle.place`'s; :func:`relaunch` places a stored run again the same way.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tcl.control.backends.base import Observer
from tcl.control.daemon.api import SubmitRequest
from tcl.control.errors import SubmitCancelled, TclError
from tcl.control.jobcheck import check_job_key, job_dirs
from tcl.control.lifecycle.place import (
    Tried,
    cancel_solving,
    job_cwd,
    job_cwd_of,
    place_and_start,
    resume_where,
    solver_request,
)
from tcl.control.lifecycle.placinglease import placing
from tcl.control.lifecycle.retry_policy import RetryPolicy
from tcl.control.paths import cache_dir
from tcl.control.runrequest import RunRequest
from tcl.control.service import Control
from tcl.control.shipping import Snapshot, cached_snapshot, snapshot
from tcl.control.solver import solve
from tcl.control.states import RunState
from tcl.control.submitted import SubmitResult
from tcl.runner.api import CodeRef, JobRef, JobSpec, SessionKind, SessionSpec

if TYPE_CHECKING:
    from tcl.control.store import Attempt

log = logging.getLogger(__name__)
LEFTOVER_CHECK_S = 10.0  # a cancelled submit asks its host this long whether anything is left

__all__ = ["Observer", "Submission", "dry_run", "submit"]


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
    nodes: int = 0  # 0: as many as the chips need
    host: str | None = None
    clusters: list[str] = field(default_factory=list)  # only hosts of these (``--cluster``)
    avoid_clusters: list[str] = field(default_factory=list)  # no host of these
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    submitter_base: dict[str, str] = field(default_factory=dict)  # the submitter's base variables
    secrets: dict[str, str] = field(default_factory=dict, repr=False)  # values: never stored
    uv_groups: list[str] = field(default_factory=list)  # the project environment's groups
    project_env: bool = True  # False: the host's environment (``--host-env``)
    cwd: Path = field(default_factory=Path.cwd)
    code_dir: Path | None = None  # ``--dir``: ship this directory (explicitly, even / or ~)
    committed: bool = False  # ``--committed``: ship the repository's HEAD, not the work tree
    max_duration_s: float | None = None
    job: JobRef | None = None  # a registered tcl.jobs job (key + config), instead of argv
    options: dict[str, str] = field(default_factory=dict)  # backend options (tpu.version, down)
    yes: bool = False  # the user confirmed a plan that creates something billed (--yes)
    job_cwd: str | None = None  # where the job starts in the tree (a relaunch: as first placed)
    retry: RetryPolicy | None = None  # place it again when it fails or is preempted
    session: SessionKind | None = None  # an interactive session (`tcl repl`, `@tcl.remote`)
    config_path: str | None = None  # the config it was placed with (its controller's too)
    config_named: bool = False


def submission_from(req: SubmitRequest) -> Submission:
    """The submit a CLI's request asks for (the daemon's, a dry run's, an in-process one's)."""
    return Submission(
        argv=req.argv,
        name=req.name,
        chip=req.chip,
        chips=req.chips,
        nodes=req.nodes,
        host=req.host,
        clusters=list(req.clusters),
        avoid_clusters=list(req.avoid_clusters),
        image=req.image,
        env=req.env,
        submitter_base=req.submitter_base,
        secrets=req.secrets,
        uv_groups=list(req.uv_groups),
        project_env=req.project_env,
        cwd=Path(req.cwd),
        code_dir=Path(req.code_dir) if req.code_dir is not None else None,
        committed=req.committed,
        max_duration_s=req.max_duration_s,
        job=req.job,
        options=req.options,
        yes=req.yes,
        retry=req.retry,
        session=req.session,
        config_path=req.config_path,
        config_named=req.config_named,
    )


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
    req = solver_request(sub)
    # The solver's probes open the SSH connections while the code is hashed and the store's
    # module (SQLAlchemy) is imported: both would otherwise wait on each other's idle time.
    solving = asyncio.create_task(solve(ctl.cfg, req, ctl.backend_of))
    try:
        snap, _ = await asyncio.gather(
            asyncio.to_thread(_snapshot_of, ctl, sub, obs),
            asyncio.to_thread(importlib.import_module, "tcl.control.store"),
        )
    except BaseException:
        await cancel_solving(solving)
        raise
    from tcl.control.store import new_run_id  # imported above, off the event loop

    if not snap.git:
        skipped = f"; skipped {snap.unreadable} unreadable" if snap.unreadable else ""
        obs.note(
            f"not in a git repository: shipping {snap.root} ({snap.files} files) "
            f"with .tclignore{skipped}"
        )

    run_id = new_run_id(sub.name)
    request = stored_request(sub, job_cwd_of(sub, snap))
    tried = Tried()
    try:
        ctl.store.create_run(run_id, sub.name, request)
    except BaseException:
        await cancel_solving(solving)
        raise
    try:
        async with placing(ctl.store, run_id):  # a controller adopts it only if we die
            return await place_and_start(ctl, sub, snap, run_id, req, solving, obs, tried)
    except BaseException as e:
        await cancel_solving(solving)
        cancelled = isinstance(e, KeyboardInterrupt | asyncio.CancelledError)
        run = ctl.store.get_run(run_id)
        att = ctl.store.latest_attempt(run_id)
        if att is None:
            # Nothing was placed (nothing fits, no host reachable, interrupted before a
            # task ran): no run to show in `tcl ps`; the error says why.
            ctl.store.delete_run(run_id)
        elif cancelled and await _nothing_left(ctl, att):
            # Ctrl-C before the job started, and its host holds nothing of it: no run left
            ctl.store.forget_cancelled_run(run_id)
        elif cancelled:
            ctl.store.set_state(
                run_id,
                RunState.TERMINATED,
                message=f"cancelled before its job started; {att.host} may still hold its task "
                "until the orphan sweep ends it",
            )
        else:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            ctl.store.set_state(run_id, RunState.FAILED, message=msg)
        if isinstance(e, asyncio.CancelledError):
            # Ctrl-C: the task is terminated and partial uploads removed (above); say so.
            host = run.host or tried.host
            where = f"nothing left on {host}" if host else "nothing was placed"
            raise SubmitCancelled(f"cancelled; {where}") from None
        raise


def _snapshot_of(ctl: Control, sub: Submission, obs: Observer) -> Snapshot:
    """The code the submit ships: the working tree, or HEAD with ``--committed`` (what the
    working tree has beyond it is named, as it is left out)."""
    start = sub.code_dir or sub.cwd
    if not sub.committed:
        return snapshot(
            start,
            cache_dir(),
            ctl.cfg.shipping.max_bytes,
            ctl.cfg.shipping.cache_max_bytes,
            explicit=sub.code_dir is not None,
        )
    from tcl.control.committed import committed_snapshot, head_commit, uncommitted

    snap = committed_snapshot(start, cache_dir(), ctl.cfg.shipping.max_bytes)
    left = uncommitted(snap.root)
    if left:
        shown = "; ".join(left[:10]) + (f"; and {len(left) - 10} more" if len(left) > 10 else "")
        obs.note(
            f"--committed: shipping HEAD {head_commit(snap.root)[:12]}; not shipped, as not "
            f"committed: {shown}"
        )
    return snap


async def _nothing_left(ctl: Control, att: Attempt) -> bool:
    """Whether the attempt's host lists no task of its run (the launch's undo reached it);
    False when the host cannot be asked now (the run is kept, for the orphan sweep)."""
    try:
        backend = ctl.backend_for_kind(att.backend)
        tasks = await asyncio.wait_for(backend.host_tasks(att.host), LEFTOVER_CHECK_S)
    except Exception as e:  # not answered: the run is kept, never lost with a task left
        log.info("run %s: cannot ask %s what is left of it: %s", att.run_id, att.host, e)
        return False
    return not any(t.run_id == att.run_id for t in tasks)


def stored_request(sub: Submission, cwd: str) -> RunRequest:
    """What the store keeps of a submit: enough to place the run again as it was submitted
    (a lost node, a retry, a matrix entry's first placement); secrets by name only."""
    return RunRequest(
        argv=list(sub.argv),
        chip=sub.chip,
        chips=sub.chips,
        nodes=sub.nodes,
        host=sub.host,
        clusters=list(sub.clusters),
        avoid_clusters=list(sub.avoid_clusters),
        image=sub.image,
        env=dict(sub.env),
        submitter_base=dict(sub.submitter_base),
        secret_names=sorted(sub.secrets),
        uv_groups=list(sub.uv_groups),
        project_env=sub.project_env,
        job=sub.job.key if sub.job else None,
        job_ref=sub.job,
        options=dict(sub.options),
        job_cwd=cwd,
        max_duration_s=sub.max_duration_s,
        retry=sub.retry,
        session=sub.session,
        config_path=sub.config_path,
        config_named=sub.config_named,
    )


async def dry_run(ctl: Control, sub: Submission) -> str:
    """The plan (host, nodes, chips per node) and what its backend would send, for every offer
    the solver would try in order; nothing is started or recorded (the code is only hashed)."""
    req = solver_request(sub)
    sol = await solve(ctl.cfg, req, ctl.backend_of)
    snap = await asyncio.to_thread(
        snapshot,
        sub.code_dir or sub.cwd,
        cache_dir(),
        ctl.cfg.shipping.max_bytes,
        ctl.cfg.shipping.cache_max_bytes,
        explicit=sub.code_dir is not None,
    )
    job = JobSpec(
        run_id="dry-run",
        name=sub.name,
        argv=sub.argv or None,
        env=dict(sub.env),
        secrets=dict.fromkeys(sub.secrets, "***"),
        cwd=job_cwd(sub.cwd, snap.root),
        code=CodeRef(sha256=snap.sha256, size=snap.size),
        max_duration_s=sub.max_duration_s,
        job=sub.job,
        session=SessionSpec(kind=sub.session) if sub.session else None,
    )
    out = [f"code: {snap.files} files, {snap.size} bytes, sha256 {snap.sha256[:12]}\n"]
    for host, why in sol.skipped:
        out.append(f"skipped {host}: {why}\n")
    for i, plan in enumerate(sol.plans):
        when = "starts now" if plan.starts_now else f"queues: {plan.queue_reason}"
        out.append(f"\nplan {i + 1} ({plan.backend}, {when}): {plan.describe()}\n")
        if plan.confirm:
            out.append(f"needs confirmation (--yes): {plan.confirm}\n")
        out.append(ctl.backend_for_kind(plan.backend).dry_run(plan, job, sub.image))
    return "".join(out)


async def relaunch(ctl: Control, run_id: str, obs: Observer | None = None) -> SubmitResult:
    """Place a run whose host lost it (a preempted cloud node) again, as its next attempt:
    the same request, code (from the local cache) and run id, so a ``tcl.jobs`` trainer
    resumes from its checkpoints. Secrets are read again from this process's environment.
    A plan that recreates a billed node needs no confirmation: the user's run asked for it."""
    run = ctl.store.get_run(run_id)
    r = run.request
    if not run.code_sha256:
        raise TclError(f"run {run_id} kept no code to place again")
    missing = [n for n in r.secret_names if n not in os.environ]
    if missing:
        raise TclError(
            f"cannot place run {run_id} again: secret {', '.join(missing)} is not in the "
            "environment of the process following it"
        )
    sub = Submission(
        argv=list(r.argv),
        name=run.name,
        chip=r.chip,
        chips=r.chips,
        nodes=r.nodes,
        host=resume_where(ctl, run_id, r.host, r.env),
        clusters=list(r.clusters),
        avoid_clusters=list(r.avoid_clusters),
        image=r.image,
        env=dict(r.env),
        submitter_base=dict(r.submitter_base),
        secrets={n: os.environ[n] for n in r.secret_names},
        uv_groups=list(r.uv_groups),
        project_env=r.project_env,
        job=r.job_ref,
        options=dict(r.options),
        yes=True,
        job_cwd=r.job_cwd,
        max_duration_s=r.max_duration_s,
        retry=r.retry,
        session=r.session,
    )
    snap = await asyncio.to_thread(cached_snapshot, cache_dir(), run.code_sha256)
    req = solver_request(sub)
    solving = asyncio.create_task(solve(ctl.cfg, req, ctl.backend_of))
    try:
        return await place_and_start(
            ctl, sub, snap, run_id, req, solving, obs or _Silent(), Tried()
        )
    finally:
        await cancel_solving(solving)
