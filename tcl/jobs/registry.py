"""The job registry: `@job("key")` on a job class; `tcl jobs` lists it.

Lookups first import the built-in jobs and the project's own (`tcl.jobs.discovery`: the modules
its pyproject.toml declares under `[tool.tcl] jobs`, and the `tcl.jobs` entry points).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from tcl.jobs import discovery
from tcl.jobs.config import schema_of
from tcl.jobs.errors import RegistryError

if TYPE_CHECKING:
    from tcl.jobs.job import BasicJob

J = TypeVar("J", bound="type[BasicJob]")

JOBS: dict[str, type[BasicJob]] = {}
# Modules that register the built-in jobs; imported on first lookup so that `import tcl.jobs`
# stays cheap (no JAX) for the CLI.
BUILTIN_MODULES = ("tcl.jobs.gpt",)


def job(key: str) -> Callable[[J], J]:
    """Register a job class under `key`; its config classes are checked for conflicts now."""
    if not key or key != key.strip():
        raise RegistryError(f"invalid job key {key!r}")

    def register(cls: J) -> J:
        seen = JOBS.get(key)
        if seen is not None and seen is not cls:
            raise RegistryError(
                f"job key {key!r} is already registered by {seen.__module__}.{seen.__qualname__}"
            )
        schema_of(cls.config_classes())  # conflicting defaults fail here, at registration
        cls.KEY = key
        JOBS[key] = cls
        return cls

    return register


def load_builtin_jobs() -> None:
    for module in BUILTIN_MODULES:
        importlib.import_module(module)


def load_jobs(start: Path | None = None, stop: Path | None = None) -> None:
    """The built-in jobs and those of the project at `start` (default: the working directory);
    a declared module that fails to import raises JobModuleError with its traceback."""
    load_builtin_jobs()
    discovery.load_project_jobs(start, stop)


def get_job(key: str) -> type[BasicJob]:
    load_jobs()
    try:
        return JOBS[key]
    except KeyError:
        known = ", ".join(sorted(JOBS)) or "none"
        close = difflib.get_close_matches(key, sorted(JOBS), n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise RegistryError(f"no job registered as {key!r}{hint} (registered: {known})") from None


@dataclass(frozen=True)
class JobListing:
    key: str
    cls: str
    kind: str
    doc: str


def list_jobs() -> list[JobListing]:
    """Every registered job, sorted by key (for `tcl jobs`)."""
    load_jobs()
    out = []
    for key, cls in sorted(JOBS.items()):
        kinds = [b.__name__ for b in cls.__mro__ if b.__module__.startswith("tcl.jobs.")]
        doc = (cls.__doc__ or "").strip().splitlines()
        out.append(
            JobListing(
                key,
                f"{cls.__module__}.{cls.__qualname__}",
                kinds[0] if kinds else "BasicJob",
                doc[0] if doc else "",
            )
        )
    return out
