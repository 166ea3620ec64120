"""Run a registered job in-process (what `tcl run KEY CONFIG.yaml OUT_DIR` calls)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from tcl.jobs.config import build_config, configuration
from tcl.jobs.errors import CheckpointError, RegistryError
from tcl.jobs.job import BasicJob, RestoreableJob, is_done
from tcl.jobs.registry import get_job
from tcl.jobs.spec import ExecutionSpec


def load_config(
    key: str, config_path: str | Path | None, overrides: Sequence[str] = ()
) -> tuple[DictConfig, DictConfig]:
    """(full, explicit) config of job `key` from a YAML file and KEY=VALUE overrides."""
    job_cls = get_job(key)
    text = Path(config_path).read_text() if config_path else None
    full, explicit = build_config(
        job_cls.config_classes(), text, overrides, source=str(config_path or "<defaults>")
    )
    full.job = key
    explicit.job = key
    return full, explicit


def make_job(
    key: str,
    spec: ExecutionSpec,
    full: DictConfig,
    explicit: DictConfig,
    restore: str | None = None,
) -> tuple[BasicJob[object], DictConfig]:
    """The job instance and the config it must run under (restored when `restore` is set)."""
    job_cls = get_job(key)
    if restore is not None:
        if not issubclass(job_cls, RestoreableJob):
            raise RegistryError(f"job {key!r} ({job_cls.__name__}) cannot be restored")
        return job_cls.from_checkpoint_path(restore, spec, explicit)
    if issubclass(job_cls, RestoreableJob) and job_cls.NEEDS_RESTORE:
        raise CheckpointError(
            f"job {key!r} ({job_cls.__name__}) reads a trained checkpoint: give --restore PATH "
            "(list them with: tcl checkpoints)"
        )
    with configuration(full):
        return job_cls(spec), full


def run_job(
    key: str,
    config_path: str | Path | None,
    out_dir: str | Path,
    restore: str | None = None,
    overrides: Sequence[str] = (),
    name: str | None = None,
    project: str = "default",
    group: str = "default",
) -> BasicJob[object]:
    """Run job `key` in this process with outputs under `out_dir`; returns the finished job.

    `restore` is a checkpoint path relative to `out_dir/checkpoints` (e.g.
    "default/default/my-run/step_00000200"); the YAML and overrides are merged over the
    checkpoint's saved config. Raises tcl.jobs.errors.JobsError subclasses on bad input.
    """
    full, explicit = load_config(key, config_path, overrides)
    spec = ExecutionSpec.local(out_dir, name or key.replace("/", "-"), project, group)
    job, cfg = make_job(key, spec, full, explicit, restore)
    with configuration(cfg):
        if not is_done(job):
            job()
    return job


def config_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg)
