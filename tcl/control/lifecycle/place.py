"""Placing a submitted run: the solver's request, then launching on each plan the solver
offers in order until one takes it (the next one on ``no_capacity``), then recording it started.

:mod:`tcl.control.lifecycle.submit` builds the :class:`~tcl.control.lifecycle.submit.Submission`
(a first submit, or a run placed again); this module chooses the host and launches it there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tcl.control.backends.base import Backend, Handle, Launched, Observer, Offer
from tcl.control.errors import (
    ConfirmationNeededError,
    NoCapacityError,
    NoPlacementError,
    PlacementAborted,
    StoreError,
)
from tcl.control.service import Control
from tcl.control.shipping import Snapshot
from tcl.control.solver import Request, Solution
from tcl.control.states import AttemptCause, RunState
from tcl.control.store import Placement
from tcl.control.submitted import SubmitResult
from tcl.runner.api import CodeRef, JobSpec, SessionSpec

if TYPE_CHECKING:
    from tcl.control.lifecycle.submit import Submission

log = logging.getLogger(__name__)

UNDO_GRACE_S = 2.0  # a job stopped because its placement could not be recorded


def solver_request(sub: Submission) -> Request:
    """What the solver is asked to place: the submit's chips, nodes, host and options."""
    return Request(
        chip=sub.chip,
        chips=sub.chips,
        nodes=sub.nodes,
        host=sub.host,
        preferred_clusters=tuple(sub.clusters),
        forbidden_clusters=tuple(sub.avoid_clusters),
        options=dict(sub.options),
        interactive=sub.session is not None,
    )


def job_cwd_of(sub: Submission, snap: Snapshot) -> str:
    """Where the submitted job starts: where it started when first placed (a relaunch), else
    from the submit's directory (:func:`job_cwd`)."""
    return sub.job_cwd if sub.job_cwd is not None else job_cwd(sub.cwd, snap.root)


def job_cwd(cwd: Path, root: Path) -> str:
    """Where the job starts, relative to the shipped root: the submit's directory when it lies
    inside the snapshot (``cd sub && tcl submit`` runs in ``sub``), else the root."""
    try:
        rel = cwd.resolve().relative_to(root)
    except ValueError:
        return ""
    return "" if rel == Path() else rel.as_posix()


@dataclass
class Tried:
    """The host where this submit last created a task (named by a cancel's message)."""

    host: str | None = None


async def cancel_solving(task: asyncio.Task[Solution]) -> None:
    """Stop the solver's task if it still runs (its probes), else take its outcome."""
    if task.done():
        if not task.cancelled():
            task.exception()  # retrieved: no "exception was never retrieved" warning
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


async def place_and_start(
    ctl: Control,
    sub: Submission,
    snap: Snapshot,
    run_id: str,
    req: Request,
    solving: asyncio.Task[Solution],
    obs: Observer,
    tried: Tried,
) -> SubmitResult:
    """Launch on the solver's plans in order (the next one on ``no_capacity``) as a new
    attempt of ``run_id``; the first that takes it is recorded started."""
    obs.status("finding hosts")
    sol = await solving
    skipped = list(sol.skipped)
    if sol.queue is not None:
        obs.note(f"nothing can start now; queueing on {sol.queue.host}: {sol.queue.queue_reason}")
    for plan in sol.plans:
        if plan.confirm and not sub.yes:
            raise ConfirmationNeededError(plan.confirm)
        backend = ctl.backend_for_kind(plan.backend)
        att = ctl.store.add_attempt(run_id, plan.host, backend.kind)
        job = JobSpec(
            run_id=run_id,
            attempt=att.attempt,
            name=sub.name,
            argv=sub.argv or None,
            env={**sub.submitter_base, **sub.env} if backend.runs_here else dict(sub.env),
            secrets=sub.secrets,
            cwd=job_cwd_of(sub, snap),
            code=CodeRef(sha256=snap.sha256, size=snap.size),
            max_duration_s=sub.max_duration_s,
            job=sub.job,
            session=SessionSpec(kind=sub.session) if sub.session else None,
            uv_groups=_groups(ctl, plan.host, sub.uv_groups),
            project_env=sub.project_env,
        )
        recorded: list[Handle] = []

        def on_handle(
            h: Handle,
            att_no: int = att.attempt,
            rec: list[Handle] = recorded,
            host: str = plan.host,
        ) -> None:
            rec.append(h)
            tried.host = host  # something exists there: a cancel cleans it up
            ctl.store.update_attempt(run_id, att_no, handle=h.model_dump(mode="json"))

        try:
            launched = await backend.launch(plan, job, snap, sub.image, obs, on_handle)
        except NoCapacityError as e:
            ctl.store.discard_attempt(run_id, att.attempt)
            skipped.append((plan.host, f"no capacity at launch: {e}"))
            continue
        except BaseException:
            if not recorded or not recorded[-1].made:
                # nothing was made on the host (the backend undid what it asked for): no
                # attempt to show
                ctl.store.discard_attempt(run_id, att.attempt)
            raise
        try:
            kept = recorded[-1] if recorded else None
            _record_started(ctl, run_id, att.attempt, plan, backend.kind, snap, launched, kept)
        except StoreError:
            # its job runs on the host and the store does not answer: not the job's fault,
            # and stopping it now would race its end (a short job ends before the stop lands,
            # then the placement made again runs it twice). It goes on; its attempt stays
            # `provisioning` with its handle, which whoever takes the run next (a controller,
            # a sweep's next claimer) adopts by asking the host (lifecycle.adopt): followed,
            # never started again. A job that ends meanwhile frees its chips on its own.
            log.warning(
                "run %s attempt %d: started on %s, not recorded (the state store did not "
                "answer); left running for adoption",
                run_id,
                att.attempt,
                plan.host,
            )
            raise
        except BaseException:
            # its job runs on the host but its run was stopped meanwhile (or the record
            # failed otherwise): it is stopped there, nothing left holding chips
            await _undo(ctl, backend, launched.handle, run_id, att.attempt)
            raise
        return SubmitResult(
            run_id=run_id,
            name=sub.name,
            host=plan.host,
            backend=backend.kind,
            task_id=launched.handle.task_label(),
            accelerators=launched.accelerators[0] if launched.accelerators else [],
            code_sha256=snap.sha256,
            code_bytes=snap.size,
            uploaded_bytes=launched.uploaded_bytes,
            skipped=skipped,
            ssh=launched.ssh,
            nodes=launched.handle.node_count,
            state=launched.state.value,
        )
    raise NoPlacementError(f"nothing fits {req.describe()} at launch; hosts now:", skipped)


def _groups(ctl: Control, host: str, asked: list[str]) -> list[str]:
    """The uv groups of the job's environment: the host's ``uv_groups``, then the submit's."""
    cfg = ctl.cfg.hosts.get(host)
    own = list(cfg.uv_groups) if cfg is not None else []
    return own + [g for g in asked if g not in own]


def _record_started(
    ctl: Control,
    run_id: str,
    attempt: int,
    plan: Offer,
    kind: str,
    snap: Snapshot,
    launched: Launched,
    kept: Handle | None,
) -> None:
    """Record the launched attempt's handle (unless ``kept``, the last one recorded, is the
    same), then its run started (one transaction); a run stopped meanwhile raises."""
    # the handle first, on its own: a store failing after it leaves what adoption asks about
    if kept != launched.handle:
        ctl.store.update_attempt(run_id, attempt, handle=launched.handle.model_dump(mode="json"))
    queued = launched.state is RunState.QUEUED
    recorded = ctl.store.record_started(
        run_id,
        attempt,
        Placement(plan.host, kind, snap.sha256),
        launched.state,
        message=(plan.queue_reason or None) if queued else None,
        cause=AttemptCause.of_end(launched.state) if launched.state.is_final else None,
    )
    if not recorded:
        raise PlacementAborted(f"run {run_id} was stopped while it was being placed")


async def _undo(ctl: Control, backend: Backend, handle: Handle, run_id: str, attempt: int) -> None:
    """Stop and free a launched attempt that was not recorded started; its attempt ends
    (``stopped`` when its run was, else ``placement_failed``). Best effort: what cannot be
    reached now is what a host's own reconcile frees (the task's max duration, its lease)."""
    try:
        await backend.stop(handle, grace_s=UNDO_GRACE_S)
        await backend.release(handle, RunState.TERMINATED)
    except Exception:
        log.warning("run %s attempt %d: stopping its unrecorded task failed", run_id, attempt)
    with contextlib.suppress(Exception):
        stopped = ctl.store.get_run(run_id).state is RunState.TERMINATED
        cause = AttemptCause.STOPPED if stopped else AttemptCause.PLACEMENT_FAILED
        released = handle.model_copy(update={"released": True}).model_dump(mode="json")
        ctl.store.update_attempt(run_id, attempt, handle=released)
        ctl.store.update_attempt(run_id, attempt, state=RunState.TERMINATED, cause=cause)


def resume_where(ctl: Control, run_id: str, pinned: str | None, env: dict[str, str]) -> str | None:
    """Where the next attempt may go: where the user pinned it; else, for a run whose out dir
    is its cluster's shared root (``tcl.control.clusterfs``), any host of that cluster (the one
    it ran on may be gone, the checkpoints are on every host of it); else anywhere."""
    if pinned is not None or "TCL_OUT_DIR" in env:
        return pinned
    att = ctl.store.latest_attempt(run_id)
    if att is None:
        return None
    host = ctl.cfg.hosts.get(att.host)
    cluster = host.cluster if host is not None else att.host  # a multi-node run: its cluster
    if cluster is None or cluster not in ctl.cfg.clusters or not ctl.cfg.clusters[cluster].root:
        return None
    return cluster
