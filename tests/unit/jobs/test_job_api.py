"""Seed 001 signatures a ported job calls: `done` as a method or a property,
`spec.result(name, main_process_only=True)`, a Flax module hydrated by `configure`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import flax.linen as nn
import pytest

from tcl.jobs.config import build_config, configuration, configure, field, schema_of
from tcl.jobs.job import BasicJob
from tcl.jobs.run import run_job
from tcl.jobs.spec import ExecutionSpec


@dataclasses.dataclass
class Cfg:
    skip: bool = field("t/skip", default=False)


class _Base(BasicJob[Cfg]):
    ran: list[str] = []

    @classmethod
    def config(cls) -> list[type]:
        return [Cfg]

    def run(self) -> None:
        _Base.ran.append(type(self).__name__)


class DoneMethod(_Base):
    def done(self) -> bool:  # type: ignore[override]  # seed 001 shows `done` as a method
        return self.args.skip


class DoneProperty(_Base):
    @property
    def done(self) -> bool:
        return self.args.skip


@pytest.mark.parametrize("cls", [DoneMethod, DoneProperty])
def test_done_as_a_method_or_a_property(
    cls: type[_Base], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tcl.jobs import registry

    monkeypatch.setitem(registry.JOBS, "t/done", cls)
    _Base.ran = []
    run_job("t/done", None, tmp_path)
    assert _Base.ran == [cls.__name__]  # done() is False: it runs
    run_job("t/done", None, tmp_path, overrides=["t/skip=true"])
    assert _Base.ran == [cls.__name__]  # done() is True: skipped


def test_spec_result_main_process_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ExecutionSpec.local(tmp_path, "r")
    with spec.result("a.json", main_process_only=True) as f:
        json.dump({"x": 1}, f)
    assert json.loads((spec.results_dir / "a.json").read_text()) == {"x": 1}
    import jax

    monkeypatch.setattr(jax, "process_index", lambda: 1)
    with spec.result("b.json", main_process_only=True) as f:
        json.dump({"x": 2}, f)
    assert not (spec.results_dir / "b.json").exists()  # another process: nothing written
    with spec.result("c.json") as f:
        f.write("every process")
    assert (spec.results_dir / "c.json").read_text() == "every process"


class TheseusStyle(nn.Module):
    hidden: int = field("architecture/hidden", default=32)
    block_size: int = field("architecture/block_size", default=16)
    extra: Any = None  # a non-config attribute with a default is left alone

    @nn.compact
    def __call__(self, x: Any) -> Any:
        return nn.Dense(self.hidden)(x)


def test_a_flax_module_with_field_settings_is_a_config_class() -> None:
    assert set(schema_of([TheseusStyle])) == {"architecture/hidden", "architecture/block_size"}
    cfg, _ = build_config([TheseusStyle], overrides=["architecture/hidden=8"])
    with configuration(cfg):
        model = configure(TheseusStyle)
    assert isinstance(model, TheseusStyle)
    assert (model.hidden, model.block_size, model.extra) == (8, 16, None)


def test_an_analysis_config_may_redeclare_a_model_key_with_its_own_default() -> None:
    """Seed 001's analysis config declares `architecture/block_size` (default 512) next to the
    model's config (default 64): it registers, and the job's own class gives the default."""
    from tcl.jobs.models.config import ModelConfig
    from tcl.jobs.registry import JOBS, job

    @dataclasses.dataclass
    class MyAnalysisConfig:
        num_samples: int = field("analysis/num_samples", default=100)
        block_size: int = field("architecture/block_size", default=512)

    class Probe(BasicJob[MyAnalysisConfig]):
        @classmethod
        def config(cls) -> list[type]:
            return [MyAnalysisConfig, ModelConfig]

        def run(self) -> None:
            pass

    try:
        job("test/analysis-probe")(Probe)
        assert Probe.default_config().architecture.block_size == 512
    finally:
        JOBS.pop("test/analysis-probe", None)
