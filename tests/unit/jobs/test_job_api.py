"""Seed 001 signatures a ported job calls: `done` as a method or a property,
`spec.result(name, main_process_only=True)`, a Flax module hydrated by `configure`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tcl.jobs.config import build_config, configuration, configure, field, schema_of
from tcl.jobs.spec import ExecutionSpec

if TYPE_CHECKING:
    from tcl.jobs.job import BasicJob

# tcl.jobs.job and flax import jax: the job classes are made when a test runs, not at collection.


@dataclasses.dataclass
class Cfg:
    skip: bool = field("t/skip", default=False)


def _done_job(kind: str, ran: list[str]) -> type[BasicJob[Cfg]]:
    """A job whose `done` is a method (as seed 001 shows it) or a property."""
    from tcl.jobs.job import BasicJob

    class _Base(BasicJob[Cfg]):
        @classmethod
        def config(cls) -> list[type]:
            return [Cfg]

        def run(self) -> None:
            ran.append(type(self).__name__)

    class DoneMethod(_Base):
        def done(self) -> bool:  # type: ignore[override]  # seed 001 shows `done` as a method
            return self.args.skip

    class DoneProperty(_Base):
        @property
        def done(self) -> bool:
            return self.args.skip

    return DoneMethod if kind == "method" else DoneProperty


@pytest.mark.parametrize("kind", ["method", "property"])
def test_done_as_a_method_or_a_property(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tcl.jobs import registry
    from tcl.jobs.run import run_job

    ran: list[str] = []
    cls = _done_job(kind, ran)
    monkeypatch.setitem(registry.JOBS, "t/done", cls)
    run_job("t/done", None, tmp_path)
    assert ran == [cls.__name__]  # done() is False: it runs
    run_job("t/done", None, tmp_path, overrides=["t/skip=true"])
    assert ran == [cls.__name__]  # done() is True: skipped


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


def _theseus_style() -> type[Any]:
    """A Flax module configured by `field` settings, as theseus writes its models."""
    import flax.linen as nn

    class TheseusStyle(nn.Module):
        hidden: int = field("architecture/hidden", default=32)
        block_size: int = field("architecture/block_size", default=16)
        extra: Any = None  # a non-config attribute with a default is left alone

        @nn.compact
        def __call__(self, x: Any) -> Any:
            return nn.Dense(self.hidden)(x)

    return TheseusStyle


def test_a_flax_module_with_field_settings_is_a_config_class() -> None:
    TheseusStyle = _theseus_style()
    assert set(schema_of([TheseusStyle])) == {"architecture/hidden", "architecture/block_size"}
    cfg, _ = build_config([TheseusStyle], overrides=["architecture/hidden=8"])
    with configuration(cfg):
        model = configure(TheseusStyle)
    assert isinstance(model, TheseusStyle)
    assert (model.hidden, model.block_size, model.extra) == (8, 16, None)


def test_an_analysis_config_may_redeclare_a_model_key_with_its_own_default() -> None:
    """Seed 001's analysis config declares `architecture/block_size` (default 512) next to the
    model's config (default 64): it registers, and the job's own class gives the default."""
    from tcl.jobs.job import BasicJob
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
