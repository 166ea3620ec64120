"""tcl.jobs."""

from __future__ import annotations


def heartbeat(step: int) -> None:
    """Report that the job reached ``step`` (a ``TCL_METRIC`` line with only the step, on
    stdout): the runner's hang detection judges progress by these (``tcl.runner.hangwatch``);
    a ``tcl.jobs`` trainer reports its steps already."""
    from tcl.runner.metricline import format_line

    print(format_line({"step": int(step), "kind": "heartbeat"}), flush=True)


def mark(phase: str) -> None:
    """Report that the attempt reached ``phase`` (one of ``tcl.runner.metricline.Phase``:
    ``jax_ready``, ``state_ready``, ``traced``, ``compiled``, ``first_step``): its time to
    first step, by phase (``tcl ps --json``, ``tcl metrics``, ``tcl ui``). A ``tcl.jobs``
    trainer marks them itself; the runner marks those it sees (runner, environment, job)."""
    from tcl.runner.metricline import Phase, phase_line

    print(phase_line(Phase(phase)), flush=True)
