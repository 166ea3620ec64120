"""A SLURM job tcl submits is named after the run and attempt it is for: ``tcl-<run id>-<attempt>``.
The names are made here (a launch) and read back here (the orphan sweep,
:mod:`tcl.control.lifecycle.orphans`); ``scripts/tasks.py`` lists the jobs whose name starts
with ``tcl-``. Jobs of older versions (``tcl-<run id>``) are not read: never swept."""

from __future__ import annotations

import re

PREFIX = "tcl-"
_NAME = re.compile(r"^tcl-(?P<run>.+)-(?P<attempt>\d+)$")


def job_name(run_id: str, attempt: int) -> str:
    return f"{PREFIX}{run_id}-{attempt}"


def read_job_name(name: str) -> tuple[str, int] | None:
    """(run id, attempt) of a name tcl gives; None for any other name."""
    m = _NAME.match(name)
    return None if m is None else (m["run"], int(m["attempt"]))
