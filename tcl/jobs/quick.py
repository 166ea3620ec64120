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


class ConfigView:
    """`j.config`: the job's config tree in struct mode (a typo'd key raises on assignment) that
    remembers every key assigned, so an override equal to the default still overrides a restored
    checkpoint's value (`j.config.logging.checkpoint_interval = 1000` when 1000 is the default
    and the checkpoint says 2500)."""

    def __init__(self, node: DictConfig, path: str, assigned: set[str]) -> None:
        object.__setattr__(self, "_node", node)
        object.__setattr__(self, "_path", path)
        object.__setattr__(self, "_assigned", assigned)

    def _child(self, name: str) -> str:
        return f"{self._path}/{name}" if self._path else name

    def _wrap(self, name: str, value: Any) -> Any:
        if isinstance(value, DictConfig):
            return ConfigView(value, self._child(name), self._assigned)
        return value

    def _record(self, name: str, value: Any) -> None:
        path = self._child(name)
        if isinstance(value, DictConfig):
            value = OmegaConf.to_container(value)
        leaves = _flat(value) if isinstance(value, dict) else {}
        self._assigned.update([f"{path}/{k}" for k in leaves] if leaves else [path])

    def __getattr__(self, name: str) -> Any:
        return self._wrap(name, getattr(self._node, name))

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._node, name, value)
        self._record(name, value)

    def __getitem__(self, name: str) -> Any:
        return self._wrap(name, self._node[name])

    def __setitem__(self, name: str, value: Any) -> None:
        self._node[name] = value
        self._record(name, value)

    def __contains__(self, name: object) -> bool:
        return name in self._node

    def __iter__(self) -> Iterator[Any]:
        return iter(self._node)

    def __repr__(self) -> str:
        return OmegaConf.to_yaml(self._node)


class QuickJob:
    """A configurable, restorable handle on one job (see `quick`)."""

    def __init__(self, key: str, name: str, out_path: str | Path, project: str, group: str) -> None:
        self.key = key
        self.job_cls = get_job(key)
        self.spec = ExecutionSpec.local(out_path, name, project, group)
        self._defaults = self.job_cls.default_config()
        self._tree: DictConfig = self._defaults.copy()
        OmegaConf.set_struct(self._tree, True)  # a typo'd key raises on assignment
        self._assigned: set[str] = set()
        self.config = ConfigView(self._tree, "", self._assigned)
        self._restore: str | None = None
        self.job: BasicJob[Any] | None = None

    def restore(self, rel_path: str | Path) -> None:
        self._restore = str(rel_path)

    def explicit(self) -> DictConfig:
        """Only the keys the user set: assigned (even to the default's value) or changed in
        place (merged over a checkpoint's config on restore)."""
        ours = _flat(OmegaConf.to_container(self._tree))
        base = _flat(OmegaConf.to_container(self._defaults))
        changed = {
            k: v for k, v in ours.items() if k in self._assigned or base.get(k, object()) != v
        }
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
