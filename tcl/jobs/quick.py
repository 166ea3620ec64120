"""quick(): run a job from a notebook.

with quick("gpt/train", "my-run", out_path="./out") as j:
    j.config.training.lr = 1e-3
    j.restore("default/default/old-run/step_00000200")   # optional
    j()
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from tcl.jobs.config import check_keys, schema_of
from tcl.jobs.job import BasicJob
from tcl.jobs.registry import get_job
from tcl.jobs.run import make_job
from tcl.jobs.spec import ExecutionSpec


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        out.update(_flat(v, f"{prefix}/{k}" if prefix else str(k)))
    return out


class QuickJob:
    """A configurable, restorable handle on one job (see `quick`)."""

    def __init__(self, key: str, name: str, out_path: str | Path, project: str, group: str) -> None:
        self.key = key
        self.job_cls = get_job(key)
        self.spec = ExecutionSpec.local(out_path, name, project, group)
        self._defaults = self.job_cls.default_config()
        self.config: DictConfig = self._defaults.copy()
        OmegaConf.set_struct(self.config, True)  # a typo'd key raises on assignment
        self._restore: str | None = None
        self.job: BasicJob[Any] | None = None

    def restore(self, rel_path: str | Path) -> None:
        self._restore = str(rel_path)

    def explicit(self) -> DictConfig:
        """Only the keys the user changed (merged over a checkpoint's config on restore)."""
        ours = _flat(OmegaConf.to_container(self.config))
        base = _flat(OmegaConf.to_container(self._defaults))
        changed = {k: v for k, v in ours.items() if base.get(k, object()) != v}
        tree = OmegaConf.create({})
        for k, v in changed.items():
            OmegaConf.update(tree, k.replace("/", "."), v, force_add=True)
        container = OmegaConf.to_container(tree)
        assert isinstance(container, dict)
        schema = schema_of(self.job_cls.config_classes())
        check_keys({str(k): v for k, v in container.items()}, schema)
        tree.job = self.key
        return tree

    def __call__(self) -> BasicJob[Any]:
        from tcl.jobs.config import configuration

        full = OmegaConf.merge(self._defaults, self.explicit())
        assert isinstance(full, DictConfig)
        job, cfg = make_job(self.key, self.spec, full, self.explicit(), self._restore)
        with configuration(cfg):
            job()
        self.job = job
        return job


@contextlib.contextmanager
def quick(
    key: str,
    name: str,
    out_path: str | Path = ".",
    project: str = "default",
    group: str = "default",
) -> Iterator[QuickJob]:
    yield QuickJob(key, name, out_path, project, group)
