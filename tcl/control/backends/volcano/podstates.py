"""A Volcano Job's and its pods' states in the run's terms: the Job's phase (``PHASES``), its
reason, and the end of a pod whose runner is gone (the events its log kept, else the kubelet's
word)."""

from __future__ import annotations

from typing import Any

from tcl.control.backends.base import RUNNER_STATES, NodePage
from tcl.control.states import RunState
from tcl.runner.api import Event

PHASES = {
    "Pending": RunState.QUEUED,
    "Restarting": RunState.QUEUED,
    "Running": RunState.RUNNING,
    "Completing": RunState.RUNNING,
    "Completed": RunState.SUCCEEDED,
    "Aborting": RunState.TERMINATED,
    "Aborted": RunState.TERMINATED,
    "Terminating": RunState.TERMINATED,
    "Terminated": RunState.TERMINATED,
    "Failed": RunState.FAILED,
}


def final(status: dict[str, Any]) -> bool:
    """The vcjob's phase is an end (Volcano restarts it no more)."""
    phase = (status.get("state") or {}).get("phase") or ""
    return PHASES.get(phase, RunState.QUEUED).is_final


def phase_reason(status: dict[str, Any]) -> str:
    state = status.get("state") or {}
    parts = [str(state.get(k)) for k in ("reason", "message") if state.get(k)]
    return ": ".join(parts)


def ended_pod_page(pod: Any, echoed: list[Event]) -> NodePage:
    """A pod whose runner is gone: the events it echoed to the pod's log that nobody fetched
    (``echoed``), and its end as the runner said it there, else as the kubelet kept it."""
    last = echoed[-1] if echoed else None
    if last is not None and last.state is not None and RUNNER_STATES[last.state].is_final:
        return NodePage(echoed, RUNNER_STATES[last.state], False, last.exit_code)
    code = None
    for cs in (pod.status.container_statuses or []) if pod.status else []:
        term = cs.state.terminated if cs.state else None
        if term is not None:
            code = term.exit_code
    state = RunState.SUCCEEDED if pod.status.phase == "Succeeded" else RunState.FAILED
    reason = getattr(pod.status, "reason", None) or ""
    msg = f"pod {pod.metadata.name} {pod.status.phase.lower()}"
    msg += f" ({reason})" if reason else ""
    msg += "; its runner ended before it reported the job's end"
    return NodePage(echoed, state, False, code, msg)
