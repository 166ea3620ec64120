"""The job registry: `@job("key")` on a job class; `tcl jobs` lists it."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

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


def get_job(key: str) -> type[BasicJob]:
    load_builtin_jobs()
    try:
        return JOBS[key]
    except KeyError:
        known = ", ".join(sorted(JOBS)) or "none"
        raise RegistryError(f"no job registered as {key!r} (registered: {known})") from None


@dataclass(frozen=True)
class JobListing:
    key: str
    cls: str
    kind: str
    doc: str


def list_jobs() -> list[JobListing]:
    """Every registered job, sorted by key (for `tcl jobs`)."""
    load_builtin_jobs()
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
