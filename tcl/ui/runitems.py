"""A run as the dashboard shows it (:class:`RunItem`): its stored fields, and what its
attempts and message say: how long it ran, where (nodes and their accelerators, read from the
latest attempt's handle, no host asked), why it ended and the last line of its error."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tcl.control.backends.table import attempt_places
from tcl.control.goodput import StartTimes
from tcl.control.states import AttemptCause, RunState
from tcl.control.store import Attempt, Run
from tcl.ui.api import AttemptItem, NodeItem, RunItem, StartSegment

# what tcl writes when a job exits (tcl.control.lifecycle.pull): "exit code 3: <its last
# stderr line>", and a retry policy may add "; 3 attempts failed"
_EXIT = re.compile(r"exit code (-?\d+)[:;]?\s*(.*)", re.DOTALL)


@dataclass(frozen=True)
class Outcome:
    cause: str  # short: "exit 3", "stopped", "node lost"; "" when it did not end, or succeeded
    error: str  # the line that says what went wrong, or ""


def outcome(run: Run, last: Attempt | None) -> Outcome:
    """Why a final run ended, from its message and its last attempt's cause; a succeeded
    run's ``exit code 0`` says nothing worth a column."""
    if not run.state.is_final or run.state is RunState.SUCCEEDED:
        return Outcome("", "")
    said = _EXIT.fullmatch(run.message.strip())
    code = int(said.group(1)) if said else run.exit_code
    error = said.group(2).strip() if said else run.message.strip()
    cause = last.cause if last is not None else None
    if cause is not None and cause is not AttemptCause.EXIT:
        return Outcome(cause.value.replace("_", " "), error)
    if code is not None:
        return Outcome(f"exit {code}", error)
    return Outcome(run.state.value, error)


def duration_s(run: Run, attempts: Sequence[Attempt], now: float) -> float | None:
    """From its first job start (its first attempt's placement, for attempts that did not keep
    it) to its end: its last attempt's end, else its last update; now while it is live."""
    starts = [a.started_at or a.created_at for a in attempts if a.started_at or a.created_at]
    if not starts:
        return None
    ended = attempts[-1].ended_at if attempts else None
    end = (ended or run.updated_at) if run.state.is_final else now
    return max(0.0, end - min(starts))


def node_items(attempt: Attempt | None) -> list[NodeItem]:
    if attempt is None:
        return []
    return [
        NodeItem(host=p.host, task=p.task, accelerators=list(p.accelerators))
        for p in attempt_places(attempt)
    ]


class PlaceCache:
    """Where ended attempts ran, read from their handles once: the runs page asks for
    thousands every 2 s, and an ended attempt's nodes no longer change (its handle may still
    be marked released)."""

    def __init__(self, size: int = 50_000) -> None:
        self.size = size
        self._ended: dict[tuple[str, int], list[NodeItem]] = {}

    def nodes(self, attempt: Attempt | None) -> list[NodeItem]:
        if attempt is None or not attempt.state.is_final:
            return node_items(attempt)
        key = (attempt.run_id, attempt.attempt)
        hit = self._ended.get(key)
        if hit is None:
            if len(self._ended) >= self.size:
                self._ended.clear()
            hit = self._ended[key] = node_items(attempt)
        return list(hit)


def run_item(
    r: Run,
    attempts: Sequence[Attempt] = (),
    now: float | None = None,
    nodes: Callable[[Attempt | None], list[NodeItem]] = node_items,
) -> RunItem:
    """``attempts``: the run's, oldest first (none: it was never placed); ``nodes``: where an
    attempt ran (a :class:`PlaceCache`'s, for many runs)."""
    now = time.time() if now is None else now
    req = r.request
    last = attempts[-1] if attempts else None
    why = outcome(r, last)
    return RunItem(
        run_id=r.id,
        name=r.name,
        state=r.state.value,
        host=r.host,
        backend=r.backend,
        chips=req.chips,
        chip=req.chip,
        created_at=r.created_at,
        age_s=max(0.0, now - r.created_at),
        command=req.command_text(),
        message=r.message,
        exit_code=r.exit_code,
        session=req.session.value if req.session else None,
        live=not r.state.is_final,
        duration_s=duration_s(r, attempts, now),
        nodes=nodes(last),
        cause=why.cause,
        error=why.error,
    )


def attempt_item(a: Attempt, start: StartTimes | None = None) -> AttemptItem:
    """``start``: its time to first step, when it marked any phase."""
    segments = start.segments if start is not None else []
    return AttemptItem(
        attempt=a.attempt,
        host=a.host,
        backend=a.backend,
        state=a.state.value,
        cause=a.cause.value if a.cause is not None else None,
        created_at=a.created_at or None,
        nodes=node_items(a),
        started_at=a.started_at,
        ended_at=a.ended_at,
        duration_s=a.duration_s,
        pid=a.pid,
        start=[StartSegment(phase=g.name, seconds=g.seconds) for g in segments],
        to_first_step_s=start.to_first_step_s if start is not None else None,
    )
