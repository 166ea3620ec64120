"""ExecutionSpec: who a job is (name, project, group, run id) and where it writes."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tcl.atomic import write_atomic

# Env overrides of the launch dirs (seed: THESEUS_DISPATCH_*_OVERRIDE).
ROOT_ENV = "TCL_DISPATCH_ROOT_OVERRIDE"
WORK_ENV = "TCL_DISPATCH_WORK_OVERRIDE"
LOG_ENV = "TCL_DISPATCH_LOG_OVERRIDE"


@dataclasses.dataclass(frozen=True)
class ExecutionSpec:
    """Identity and directories of one job.

    Checkpoints live at `checkpoints_dir / project / group / name [/ run_id] / suffix`; the
    run id segment is present when the launcher runs the job, so one run id maps to one set of
    checkpoints and a resubmitted run resumes its own.
    """

    name: str
    project: str = "default"
    group: str = "default"
    root_dir: Path = Path(".")
    work_dir: Path | None = None
    log_dir: Path | None = None
    run_id: str | None = None

    @classmethod
    def local(
        cls,
        root_dir: str | Path,
        name: str,
        project: str = "default",
        group: str = "default",
        run_id: str | None = None,
    ) -> ExecutionSpec:
        root = Path(os.environ.get(ROOT_ENV) or root_dir).resolve()
        work = os.environ.get(WORK_ENV)
        log = os.environ.get(LOG_ENV)
        return cls(
            name=name,
            project=project,
            group=group,
            root_dir=root,
            work_dir=Path(work).resolve() if work else None,
            log_dir=Path(log).resolve() if log else None,
            run_id=run_id,
        )

    @property
    def checkpoints_dir(self) -> Path:
        return self.root_dir / "checkpoints"

    @property
    def results_dir(self) -> Path:
        return self.work_dir or self.root_dir / "results" / self.scope

    @property
    def logs_dir(self) -> Path:
        return self.log_dir or self.root_dir / "logs" / self.scope

    @property
    def scope(self) -> str:
        parts = [self.project, self.group, self.name] + ([self.run_id] if self.run_id else [])
        return "/".join(parts)

    @property
    def status_dir(self) -> Path:
        return (
            self.root_dir
            / "status"
            / self.project
            / self.group
            / self.name
            / (self.run_id or "local")
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "project": self.project,
            "group": self.group,
            "run_id": self.run_id,
        }

    def patched(self, saved: dict[str, Any]) -> ExecutionSpec:
        """This spec with the identity fields of a saved `job.json` (dirs stay ours)."""
        keys = ("name", "project", "group", "run_id")
        return dataclasses.replace(self, **{k: saved[k] for k in keys if k in saved})

    @contextlib.contextmanager
    def result(self, name: str, main_process_only: bool = False) -> Iterator[IO[str]]:
        """Write a result file atomically under `results_dir` (on success only). With
        `main_process_only`, other processes of a multi-host job write nothing."""
        buf = io.StringIO()
        yield buf
        if main_process_only:
            import jax  # here, not above: the spec is imported by JAX-free code

            if jax.process_index() != 0:
                return
        write_atomic(self.results_dir / name, buf.getvalue())
