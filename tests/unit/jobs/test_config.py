"""Config fields: each test here fails on the original theseus behaviour it names."""

from __future__ import annotations  # on purpose: nested configs must work with PEP 563

import dataclasses
from typing import Any

import pytest
from omegaconf import OmegaConf

from tcl.jobs.config import (
    build_config,
    configuration,
    configure,
    current_config,
    declared_fields,
    field,
    parse_override,
    schema_of,
)
from tcl.jobs.errors import ConfigError, RegistryError
from tcl.jobs.registry import JOBS, job


@dataclasses.dataclass
class Opt:
    lr: float = field("training/lr", default=3e-4)
    schedule: str | None = field("training/schedule", default=None)
    steps: int = field("training/steps", default=10)


@dataclasses.dataclass
class Inner:
    width: int = field("width", default=8)
    tag: str | None = field("tag", default=None)


@dataclasses.dataclass
class Middle:
    inner: Inner = field("inner", default_factory=Inner)
    depth: int = field("depth", default=2)


@dataclasses.dataclass
class Outer:
    middle: Middle = field("model/middle", default_factory=Middle)
    deep: int = field("a/b/c/d/e", default=5)


@dataclasses.dataclass
class Needs:
    name: str = field("run/name")  # no default: required


def _cfg(*classes: type, yaml_text: str | None = None, overrides: tuple[str, ...] = ()) -> Any:
    full, _ = build_config(list(classes), yaml_text, overrides)
    return full


def test_none_is_a_valid_default() -> None:
    # Original: `default=None` meant "no default", so the key was required/dropped.
    with configuration(_cfg(Opt)):
        opt = configure(Opt)
    assert opt.schedule is None
    assert opt.lr == 3e-4


def test_a_field_without_default_is_required_and_named() -> None:
    with configuration(_cfg(Needs)), pytest.raises(ConfigError, match="run/name"):
        configure(Needs)
    with configuration(_cfg(Needs, overrides=("run/name=x",))):
        assert configure(Needs).name == "x"


def test_nesting_at_any_depth_with_future_annotations() -> None:
    # Original: nested dataclass fields under PEP 563 were strings and were not recursed.
    schema = declared_fields(Outer)
    assert set(schema) == {
        "model/middle/inner/width",
        "model/middle/inner/tag",
        "model/middle/depth",
        "a/b/c/d/e",
    }
    cfg = _cfg(
        Outer,
        yaml_text="model:\n  middle:\n    inner:\n      width: 3\n",
        overrides=("a.b.c.d.e=9",),
    )
    with configuration(cfg):
        outer = configure(Outer)
    assert outer.middle.inner.width == 3
    assert outer.middle.inner.tag is None
    assert outer.middle.depth == 2
    assert outer.deep == 9


def test_unknown_yaml_key_is_an_error_naming_key_line_and_nearest() -> None:
    # Original: undeclared keys were merged in and silently ignored.
    text = "training:\n  lr: 0.1\n  setps: 5\n"
    with pytest.raises(ConfigError) as e:
        _cfg(Opt, yaml_text=text)
    msg = str(e.value)
    assert "training/setps" in msg and "line 3" in msg and "training/steps" in msg
    assert e.value.line == 3


def test_unknown_override_is_an_error_naming_the_nearest_key() -> None:
    with pytest.raises(ConfigError, match=r"training/lrr.*did you mean 'training/lr'"):
        _cfg(Opt, overrides=("training.lrr=1",))


def test_a_scalar_where_a_section_is_declared_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"training.*section"):
        _cfg(Opt, yaml_text="training: 3\n")


def test_the_first_config_class_wins_a_default_conflict() -> None:
    from tcl.jobs.job import BasicJob  # imports jax: not at collection

    # Original: the last class listed silently won, so a library's config could override the
    # job's own. Here the job's own class (first, `self.args`) wins; seed 001's analysis config
    # declares `architecture/block_size` next to the model's with another default.
    @dataclasses.dataclass
    class Other:
        lr: float = field("training/lr", default=1e-3)

    class Mine(BasicJob[Opt]):
        @classmethod
        def config(cls) -> list[type]:
            return [Opt, Other]

        def run(self) -> None:
            pass

    try:
        job("test/first-wins")(Mine)
        assert Mine.default_config().training.lr == 3e-4
        assert schema_of([Other, Opt])["training/lr"].default == 1e-3
    finally:
        JOBS.pop("test/first-wins", None)


def test_conflicting_types_fail_at_registration() -> None:
    from tcl.jobs.job import BasicJob  # imports jax: not at collection

    @dataclasses.dataclass
    class Other:
        lr: str = field("training/lr", default="fast")

    class Conflicted(BasicJob[Opt]):
        @classmethod
        def config(cls) -> list[type]:
            return [Opt, Other]

        def run(self) -> None:
            pass

    expected = r"training/lr: declared as float by Opt and as str by"
    with pytest.raises(ConfigError, match=expected):
        job("test/conflicted")(Conflicted)
    assert "test/conflicted" not in JOBS


def test_equal_defaults_in_two_classes_are_fine() -> None:
    @dataclasses.dataclass
    class Same:
        lr: float = field("training/lr", default=3e-4)

    assert set(schema_of([Opt, Same])) == {"training/lr", "training/schedule", "training/steps"}


def test_types_are_checked_and_named() -> None:
    with (
        configuration(_cfg(Opt, overrides=("training/steps=abc",))),
        pytest.raises(ConfigError, match="training/steps"),
    ):
        configure(Opt)
    with configuration(_cfg(Opt, overrides=("training/lr=1e-3",))):
        assert configure(Opt).lr == pytest.approx(1e-3)  # YAML reads 1e-3 as a string


def test_overrides_parse_values_and_keys() -> None:
    assert parse_override("a.b=null") == ("a/b", None)
    assert parse_override("a/b=[1, 2]") == ("a/b", [1, 2])
    with pytest.raises(ConfigError):
        parse_override("novalue")


def test_explicit_tree_holds_only_what_the_user_set() -> None:
    full, explicit = build_config([Opt], "training:\n  lr: 0.5\n", ("training/steps=3",))
    assert OmegaConf.to_container(explicit) == {"training": {"lr": 0.5, "steps": 3}}
    assert full.training.schedule is None


def test_current_config_outside_a_context_is_an_error() -> None:
    with pytest.raises(ConfigError, match="no active configuration"):
        current_config()


def test_registering_a_key_twice_is_an_error() -> None:
    from tcl.jobs.job import BasicJob  # imports jax: not at collection

    class A(BasicJob[Opt]):
        @classmethod
        def config(cls) -> list[type]:
            return [Opt]

        def run(self) -> None:
            pass

    class B(A):
        pass

    try:
        job("test/twice")(A)
        with pytest.raises(RegistryError, match="already registered"):
            job("test/twice")(B)
    finally:
        JOBS.pop("test/twice", None)


def test_yaml_errors_name_the_line() -> None:
    with pytest.raises(ConfigError, match=r"\(line 2\): invalid YAML"):
        _cfg(Opt, yaml_text="training:\n\tlr: 1\n")
