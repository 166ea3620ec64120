"""The runner's time bounds, in one dependency-free module (``main`` imports it before
anything heavy). Each keeps a deadline the runner computes finite, so no stop request or spec
can make a timer overflow or a kill never come."""

from __future__ import annotations

# How long a job may take to exit after a stop signal before SIGKILL, unless told otherwise
# (``/api/stop``'s ``grace_s``, ``tcl-runner --stop-grace-s``).
DEFAULT_GRACE_S = 10.0
MAX_GRACE_S = 3600.0
MAX_DURATION_S = 366 * 24 * 3600.0  # ``JobSpec.max_duration_s``: a year, leap day included

# A served runner whose job has not started this long after the runner did was abandoned by
# its submit (killed between creating the task and sending the job): it ends the run, so the
# shim frees the task's accelerators. Long enough for a large code upload on a slow link.
DEFAULT_START_TIMEOUT_S = 900.0
