"""What ``tcl.jobs`` needs from the python it runs on, checked before anything imports it.

In the runner image a ``job`` spec runs on the user's image's python (tcl's venv stays out of the
job), so a package the image lacks should fail the run with one line in its log that names it,
not with a traceback from the middle of the first import.
"""

from __future__ import annotations

import importlib.util
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
        "image's own python, so the image must provide tcl's job dependencies "
        f"({', '.join(JOB_DEPENDENCIES.values())}; see docs/runner.md, Image)"
    )
