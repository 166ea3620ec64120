"""tcl.jobs."""

from __future__ import annotations


def heartbeat(step: int) -> None:
    """Report that the job reached ``step`` (a ``TCL_METRIC`` line with only the step, on
    stdout): the runner's hang detection judges progress by these (``tcl.runner.hangwatch``);
    a ``tcl.jobs`` trainer reports its steps already."""
    from tcl.runner.metricline import format_line

    print(format_line({"step": int(step), "kind": "heartbeat"}), flush=True)
