"""Scripts run on the login node (``python -c SCRIPT ARGS``, the cluster's interpreter).

Each answers in one round trip, as one JSON line: a node's events after a seq (read-only: the
runner's event log is an ``events.jsonl`` plus an offset index ``events.idx``, see
``tcl.runner.events``) with its ``status.json`` and the job's ``squeue`` row; or many runs'
squeue rows and status files at once (``tcl ps``); or this user's jobs named by tcl (the orphan
sweep). Their sources are the standard-library
programs in :mod:`tcl.control.backends.slurm.scripts`, sent as text: each file's docstring
states its argv, stdin and stdout.
"""

from __future__ import annotations

from importlib import resources

_SCRIPTS = resources.files("tcl.control.backends.slurm.scripts")

# argv: STATE_DIR AFTER LIMIT WAIT_S JOB_ID SQUEUE_FIELDS
EVENTS_PY = _SCRIPTS.joinpath("events.py").read_text(encoding="utf-8")

# argv: SQUEUE_FIELDS; stdin: {"jobs": [ids], "dirs": [state dirs]}
STATUSES_PY = _SCRIPTS.joinpath("statuses.py").read_text(encoding="utf-8")

# argv: none; stdin: none (the orphan sweep: this user's jobs named by tcl, with their ages)
TASKS_PY = _SCRIPTS.joinpath("tasks.py").read_text(encoding="utf-8")

# argv: ATTEMPT_DIR RETENTION_S (the release: this attempt's dir marked ended, the ended ones
# past the retention removed)
PRUNE_PY = _SCRIPTS.joinpath("prune.py").read_text(encoding="utf-8")
