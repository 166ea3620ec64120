"""Finding a project's own jobs: the modules it declares, imported from the project's root.

A project (the user's repo, shipped with their code) declares the modules that register its jobs
with ``@job("key")`` in its ``pyproject.toml``::

    [tool.tcl]
    jobs = ["mypkg.jobs"]

An installed distribution may declare them as entry points instead::

    [project.entry-points."tcl.jobs"]
    mypkg = "mypkg.jobs"

``tcl run``, ``tcl jobs``, ``tcl submit --job`` (in a child process, before anything ships) and
the launcher on the host all find them the same way: the project is the nearest
``pyproject.toml`` from the directory the job starts in, up to the repository root (a directory
holding ``.git``) or ``stop`` (on a host: the shipped tree's root, ``$TCL_WORKING_DIR``, so a
file above it is never picked up). The project's directory goes first on ``sys.path``, as it
would for ``python -m`` run there. A module that fails to import is an error that carries its
traceback, never "not registered". No JAX here: this module is cheap to import.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import tomllib
import traceback
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from tcl.jobs.errors import ConfigError, JobModuleError

PROJECT_FILE = "pyproject.toml"
ENTRY_POINT_GROUP = "tcl.jobs"
WORKING_DIR_ENV = "TCL_WORKING_DIR"  # set by the runner: the root of the shipped tree

# (source, module) pairs imported in this process; a failed import is retried (and fails again).
_LOADED: set[tuple[str, str]] = set()


def find_project(start: Path, stop: Path | None = None) -> Path | None:
    """The nearest pyproject.toml at or above `start`, looking no higher than `stop` or the
    first directory that holds `.git`."""
    here = start.resolve()
    bound = stop.resolve() if stop is not None else None
    for directory in (here, *here.parents):
        candidate = directory / PROJECT_FILE
        if candidate.is_file():
            return candidate
        if directory == bound or (directory / ".git").exists():
            return None
    return None


def declared_modules(pyproject: Path) -> list[str]:
    """The module names of ``[tool.tcl] jobs`` (none when the table or key is absent)."""
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read it: {e}", key=str(pyproject)) from None
    tool = data.get("tool", {})
    section = tool.get("tcl", {}) if isinstance(tool, dict) else {}
    modules = section.get("jobs", []) if isinstance(section, dict) else []
    if not isinstance(modules, list) or not all(isinstance(m, str) and m.strip() for m in modules):
        raise ConfigError(
            'tool.tcl.jobs must be a list of module names, e.g. jobs = ["mypkg.jobs"]',
            key=str(pyproject),
        )
    return [m.strip() for m in modules]


def default_stop(start: Path) -> Path | None:
    """On a host the runner sets $TCL_WORKING_DIR (the shipped tree): look no higher."""
    env = os.environ.get(WORKING_DIR_ENV)
    if not env:
        return None
    root = Path(env).resolve()
    return root if start.resolve().is_relative_to(root) else None


def load_project_jobs(start: Path | None = None, stop: Path | None = None) -> list[str]:
    """Import the `tcl.jobs` entry points and the modules the project at `start` (default: the
    working directory) declares; returns the modules imported by this call."""
    here = Path.cwd() if start is None else start
    bound = stop if stop is not None else default_stop(here)
    done: list[str] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = ep.dist.name if ep.dist is not None else "an installed distribution"
        source = f"entry point {ep.name!r} of {dist} (group {ENTRY_POINT_GROUP!r})"
        if _import(ep.value, source, ep.load):
            done.append(ep.value)
    pyproject = find_project(here, bound)
    if pyproject is None:
        return done
    modules = declared_modules(pyproject)
    if modules:
        root = str(pyproject.parent)
        if root not in sys.path:
            sys.path.insert(0, root)
    for module in modules:
        if _import(module, str(pyproject), functools.partial(importlib.import_module, module)):
            done.append(module)
    return done


def _import(module: str, source: str, load: Callable[[], Any]) -> bool:
    if (source, module) in _LOADED:
        return False
    try:
        load()
    except Exception as e:
        raise JobModuleError(module, source, _user_traceback(e)) from None
    _LOADED.add((source, module))
    return True


def _user_traceback(e: BaseException) -> str:
    """The traceback without importlib's and this module's frames: what the user wrote."""
    te = traceback.TracebackException.from_exception(e)
    keep = [
        f
        for f in te.stack
        if not f.filename.startswith("<frozen importlib")
        and f.filename != __file__
        and not f.filename.endswith(("importlib/__init__.py", "importlib/metadata/__init__.py"))
    ]
    te.stack = traceback.StackSummary.from_list(keep)
    return "".join(te.format()).rstrip()
