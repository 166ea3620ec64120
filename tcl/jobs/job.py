"""The job hierarchy: BasicJob → CheckpointedJob → RestoreableJob (→ BaseTrainer, InferenceJob)."""

from __future__ import annotations

import abc
import json
import logging
import threading
from pathlib import Path
from typing import Any, ClassVar, Generic, Self, TypeVar

import jax
from jax.experimental import multihost_utils
from omegaconf import DictConfig, OmegaConf

from tcl.jobs import checkpoint as ckpt
from tcl.jobs.config import (
    build_config,
    configuration,
    configure,
    current_config,
    defaults_tree,
    merge,
    schema_of,
)
from tcl.jobs.errors import CheckpointError
from tcl.jobs.layout import resolve_restore
from tcl.jobs.spec import ExecutionSpec

C = TypeVar("C")
log = logging.getLogger("tcl.jobs")


def _sync(name: str) -> None:
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


class BasicJob(abc.ABC, Generic[C]):
    """Root of every job: config, run, done, __call__."""

    KEY: ClassVar[str] = ""
    args: C

    @classmethod
    @abc.abstractmethod
    def config(cls) -> type | list[type]:
        """The config dataclass(es); the first becomes `self.args`."""

    @classmethod
    def config_classes(cls) -> list[type]:
        c = cls.config()
        return list(c) if isinstance(c, list | tuple) else [c]

    @classmethod
    def default_config(cls) -> DictConfig:
        return defaults_tree(schema_of(cls.config_classes()))

    def __init__(self, spec: ExecutionSpec) -> None:
        self.spec = spec
        self.args = configure(self.config_classes()[0])
        # Set by the launcher's SIGTERM handler; long-running jobs poll it (see stop_requested).
        self.stop_event = threading.Event()

    @property
    def done(self) -> bool:
        """True → the launcher skips this job (override when a result file proves it ran).

        A subclass may define it as a property or, as seed 001 shows it, a method: read it
        with `is_done(job)`."""
        return False

    @abc.abstractmethod
    def run(self) -> None:
        """The computation; runs on every host."""

    def __call__(self) -> None:
        _sync("tcl.jobs.start")
        self.run()
        _sync("tcl.jobs.end")
        self.finish()

    def finish(self) -> None:
        """Called after run() completes."""

    def stop_requested(self) -> bool:
        return self.stop_event.is_set()

    @classmethod
    def local(
        cls, root_dir: str | Path, name: str, project: str = "default", group: str = "default"
    ) -> Self:
        """A job for this machine; uses the active configuration, or the defaults if none."""
        spec = ExecutionSpec.local(root_dir, name, project, group)
        try:
            current_config()
        except Exception:
            cfg, _ = build_config(cls.config_classes())
            with configuration(cfg):
                return cls(spec)
        return cls(spec)

    @staticmethod
    def main_process() -> bool:
        return jax.process_index() == 0


def is_done(job: BasicJob[Any]) -> bool:
    """`job.done`, whether the job defines it as a property or as a method."""
    done: Any = job.done
    return bool(done() if callable(done) else done)


class CheckpointedJob(BasicJob[C]):
    """Adds saving and loading of pytrees with metadata (Orbax)."""

    # The job's JAX key: saved in rng.npy and restored exactly.
    key: jax.Array | None = None

    @staticmethod
    def _get_checkpoints_dir(spec: ExecutionSpec) -> Path:
        return spec.checkpoints_dir

    @staticmethod
    def _get_checkpoint_rel_path(spec: ExecutionSpec, suffix: str | Path) -> Path:
        return Path(spec.scope) / suffix

    @staticmethod
    def _get_checkpoint_path(spec: ExecutionSpec, suffix: str | Path) -> Path:
        return spec.checkpoints_dir / spec.scope / suffix

    def _abs(self, rel_path: str | Path) -> Path:
        path = (self.spec.checkpoints_dir / rel_path).resolve()
        if self.spec.checkpoints_dir.resolve() not in path.parents:
            raise CheckpointError(f"{rel_path} is not below {self.spec.checkpoints_dir}")
        return path

    def get_tree_and_metadata_from_path(
        self, rel_path: str | Path, template_tree: Any, partial: bool = False
    ) -> tuple[Any, dict[str, Any]]:
        tree, metadata, key = ckpt.load(self._abs(rel_path), template_tree, partial)
        if key is not None:
            self.key = key
        return tree, metadata

    def get_tree_and_metadata(
        self, suffix: str | Path, template_tree: Any
    ) -> tuple[Any, dict[str, Any]]:
        return self.get_tree_and_metadata_from_path(
            self._get_checkpoint_rel_path(self.spec, suffix), template_tree
        )

    def save_tree_and_metadata_from_path(
        self, rel_path: str | Path, tree: Any, metadata: dict[str, Any]
    ) -> None:
        """Save `tree` and `metadata` at `rel_path`: written beside, then swapped in, so saving
        over any checkpoint (the one `latest` names included) is safe and atomic."""
        target = self._abs(rel_path)
        if self.main_process():
            ckpt.clear_partial(target)
        _sync("tcl.jobs.save.start")
        job = {**self.spec.to_json(), "job": self.KEY}
        source = (getattr(self, "restored_from", None) or {}).get("path")
        if source and not str(source).startswith(self.spec.scope + "/"):
            job["restored_from"] = source  # another run's checkpoint: the lineage
        ckpt.save(
            target,
            tree,
            metadata,
            job,
            OmegaConf.to_yaml(current_config()),
            self.key,
            self.main_process(),
        )
        _sync("tcl.jobs.save.end")

    def save_tree_and_metadata(
        self, suffix: str | Path, tree: Any, metadata: dict[str, Any]
    ) -> None:
        self.save_tree_and_metadata_from_path(
            self._get_checkpoint_rel_path(self.spec, suffix), tree, metadata
        )

    def get_metadata_from_path(self, rel_path: str | Path) -> dict[str, Any]:
        return ckpt.load_metadata(self._abs(rel_path))

    def get_metadata(self, suffix: str | Path) -> dict[str, Any]:
        return self.get_metadata_from_path(self._get_checkpoint_rel_path(self.spec, suffix))


class RestoreableJob(CheckpointedJob[C]):
    """Adds the restore protocol: restore_from_path, register/latest, from_checkpoint_path."""

    restored_from: dict[str, Any] | None = None  # job.json of the checkpoint restored, if any
    _registered: str | None = None  # what this job's register() last named (see registered())
    # True for jobs that only make sense on a checkpoint (InferenceJob): started without a
    # restore they stop with one line saying so.
    NEEDS_RESTORE: ClassVar[bool] = False

    @abc.abstractmethod
    def restore_from_path(self, rel_path: str | Path) -> None:
        """Load what run() needs from the checkpoint at `rel_path` (config context active)."""

    def restore(self, suffix: str | Path) -> None:
        self.restore_from_path(self._get_checkpoint_rel_path(self.spec, suffix))

    def register(self, suffix: str | Path) -> None:
        """Point `latest` at `suffix` (main process only); call after each resumable save."""
        if self.main_process():
            ckpt.register(self.spec.checkpoints_dir / self.spec.scope, str(suffix))
        self._registered = str(suffix)

    def registered(self) -> str | None:
        """The checkpoint `latest` names, the same on every process of a multi-host job: what
        this job registered last, else `latest` on disk, which only a register() changes.

        Deciding on a save from the `latest` file itself would not be: process 0 writes it after
        the save's last sync, so another process may still read the old one, skip or repeat a
        save that is collective, and stop the job (or a shared disk may show it late)."""
        return self._registered if self._registered is not None else self.latest(self.spec)

    @classmethod
    def latest(cls, spec: ExecutionSpec) -> str | None:
        return ckpt.latest(spec.checkpoints_dir / spec.scope)

    @classmethod
    def checkpoints(cls, spec: ExecutionSpec) -> list[str]:
        return ckpt.list_checkpoints(spec.checkpoints_dir / spec.scope)

    @classmethod
    def from_checkpoint_path(
        cls, rel_path: str | Path, spec: ExecutionSpec, runtime_cfg: DictConfig | None = None
    ) -> tuple[Self, DictConfig]:
        """Restore: saved config.yaml ⊕ runtime_cfg (only what the user set), then
        `job_cls(spec).restore_from_path(rel_path)` inside that configuration.

        The job keeps `spec`'s identity: it writes its own checkpoints, never into the run it
        was restored from. The saved job.json (plus "path") is kept as `job.restored_from` and
        recorded as "restored_from" in the job.json of the checkpoints it saves. `rel_path` may
        leave out the launcher's run-id folder, or name a run (its latest): see
        `layout.resolve_restore`.
        """
        from tcl.jobs.registry import get_job

        rel_path = resolve_restore(spec.checkpoints_dir, rel_path)
        directory = (spec.checkpoints_dir / rel_path).resolve()
        if not ckpt.is_complete(directory):
            raise CheckpointError(f"no complete checkpoint at {directory}")
        saved_job = json.loads((directory / ckpt.JOB_FILE).read_text())
        saved_cfg = OmegaConf.load(directory / ckpt.CONFIG_FILE)
        assert isinstance(saved_cfg, DictConfig)
        runtime = runtime_cfg if runtime_cfg is not None else OmegaConf.create({})
        key = runtime.get("job") or saved_cfg.get("job")
        job_cls = get_job(str(key)) if key else cls
        cfg = merge(job_cls.default_config(), saved_cfg, runtime)
        with configuration(cfg):
            job = job_cls(spec)
            assert isinstance(job, RestoreableJob)
            job.restored_from = {**saved_job, "path": str(rel_path)}
            job.restore_from_path(rel_path)
            log.info("restored %s from %s", job_cls.__name__, rel_path)
        return job, cfg  # type: ignore[return-value]

    @classmethod
    def from_checkpoint(
        cls, suffix: str | Path, spec: ExecutionSpec, runtime_cfg: DictConfig | None = None
    ) -> tuple[Self, DictConfig]:
        return cls.from_checkpoint_path(
            cls._get_checkpoint_rel_path(spec, suffix), spec, runtime_cfg
        )
