"""What ``tcl.jobs`` needs from the python it runs on, checked before anything imports it.

A ``job`` spec runs on the job's own python: its uv project's environment, or the user's
image's (tcl's venv stays out of the job), so a package that python lacks should fail the run
with one line in its log that names it, not with a traceback from the middle of the first
import.
"""

from __future__ import annotations

import importlib.util
import os
import sys

# Module -> the distribution pip installs it from. jaxlib comes with ``pip install jax[cuda12]``.
JOB_DEPENDENCIES = {
    "jax": "jax",
    "jaxlib": "jaxlib",
    "flax": "flax",
    "optax": "optax",
    "orbax.checkpoint": "orbax-checkpoint",
    "omegaconf": "omegaconf",
    "numpy": "numpy",
    "yaml": "pyyaml",
}


# Set by the runner for a job in a project's environment: a directory of links to these
# distributions as the runner has them (``tcl.runner.lend``), usable by its Python version only.
LENT_PATH_VAR = "TCL_JOBS_LENT_PATH"
LENT_PYTHON_VAR = "TCL_JOBS_LENT_PYTHON"  # "3.11"


def use_lent() -> None:
    """Append the runner's lent distributions to the path, after the project's own packages
    (which win), when this is the Python version they were installed for."""
    lent = os.environ.get(LENT_PATH_VAR)
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if lent and os.environ.get(LENT_PYTHON_VAR) == here and lent not in sys.path:
        sys.path.append(lent)


def missing() -> list[str]:
    """The distributions whose modules this python cannot find (found, not imported: fast)."""
    lacking = []
    for module, dist in JOB_DEPENDENCIES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:  # a dotted name whose parent package is missing
            found = False
        if not found:
            lacking.append(dist)
    return lacking


def explain(lacking: list[str]) -> str:
    return (
        f"error: {sys.executable} cannot import {', '.join(lacking)}: a tcl.jobs job runs on the "
        "job's own python (its uv project's environment, or its image's), which must provide "
        f"tcl's job dependencies ({', '.join(JOB_DEPENDENCIES.values())}; see docs/runner.md)"
    )
