"""Bringing runs' states up to date (`tcl ps`): one batched status call per backend, for the
runs no controller owns (an owned run's state in the store is its owner's, kept current)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tcl.control.errors import TclError
from tcl.control.lifecycle.pull import RETRYABLE, pull, record_state
from tcl.control.runleases import RunLeases
from tcl.control.service import Control
from tcl.control.states import AttemptCause

if TYPE_CHECKING:
    from tcl.control.store import Attempt, Run


REFRESH_TIMEOUT_S = 15.0  # a slow login node answers a batched status call in 8 s or more


async def refresh_many(
    ctl: Control, runs: Sequence[Run], timeout_s: float = REFRESH_TIMEOUT_S
) -> list[Run]:
    """Bring non-final runs' states up to date: one batched status call per backend (a SLURM
    host answers all its runs in one round trip); runs that ended are then drained and
    released. A run whose host cannot be reached is left as it was (`tcl ps`: unknown); one
    whose host is slow to answer (past ``timeout_s``) keeps its stored state: slow is not
    unreachable."""
    live = [r for r in runs if not r.state.is_final and r.host is not None]
    # a run its controller owns is that controller's to advance: the store says how it is
    owned = RunLeases(ctl.store).of([r.id for r in live])
    live = [r for r in live if r.id not in owned or not owned[r.id].live()]
    groups: dict[str, list[tuple[Run, Attempt]]] = {}
    attempts = ctl.store.attempts_of([r.id for r in live]) if live else {}  # one query
    for r in live:
        att = attempts[r.id][-1] if attempts.get(r.id) else None
        if att is not None and att.handle:
            groups.setdefault(att.backend, []).append((r, att))

    async def one_backend(kind: str, items: list[tuple[Run, Attempt]]) -> None:
        try:
            backend = ctl.backend_for_kind(kind)
            handles = [ctl.handle(att) for _, att in items]
            answers = await asyncio.wait_for(backend.statuses(handles), timeout_s)
        except TimeoutError:
            return  # it answers, slowly: what the store says stands
        except TclError:
            for r, _ in items:
                ctl.store.note_unreachable(r.id)
            return
        pairs = list(zip(items, answers, strict=True))
        ctl.store.clear_unreachable(*(r.id for (r, _), a in pairs if not isinstance(a, Exception)))
        for (r, att), ans in zip(items, answers, strict=True):
            if isinstance(ans, Exception):
                if isinstance(ans, RETRYABLE):
                    ctl.store.note_unreachable(r.id)
                continue
            if ans.state.is_final or ans.state != r.state:
                with contextlib.suppress(TclError, TimeoutError):
                    run_now = ctl.store.get_run(r.id)
                    await asyncio.wait_for(pull(ctl, run_now, relaunch=False), timeout_s)
            cause = AttemptCause.of_end(ans.state)
            now = ctl.store.get_run(r.id)
            record_state(ctl, now, att, ans.state, ans.exit_code, ans.message, cause)

    await asyncio.gather(*(one_backend(k, items) for k, items in groups.items()))
    if not groups:
        return list(runs)  # nothing was asked, so nothing changed (`tcl ps -a`: no query)
    now = ctl.store.runs_by_id([r.id for r in runs])  # one query, not one per run
    return [now.get(r.id, r) for r in runs]


async def refresh(ctl: Control, run: Run, timeout_s: float = REFRESH_TIMEOUT_S) -> Run:
    """One run's state brought up to date (see :func:`refresh_many`)."""
    return (await refresh_many(ctl, [run], timeout_s))[0]
