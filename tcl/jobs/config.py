"""Config fields: dataclass fields that carry a path into one OmegaConf tree.

    @dataclass
    class Opt:
        lr: float = field("training/lr", default=3e-4)

A job names its config classes (`config()`); their fields are merged into one tree, the user's
YAML and `key=value` overrides are checked against it (an undeclared key is an error naming the
nearest declared one), and `configure(cls)` builds an instance from the active tree.
A Flax module whose settings are such fields is a config class too (seed 001's `MODEL`):
`configure(MyModel)` builds the module, and its other attributes (Flax's `parent` and `name`,
or any attribute with a default and no path) are left alone.

Differences from the original: `None` is a real default (a field without one is required),
nested dataclasses work at any depth and under `from __future__ import annotations`, and when
several classes declare one path the first one listed gives the default (the job's own config
comes first; the original let the last one win), while declaring it with two types fails at
registration.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import difflib
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf

from tcl.jobs.errors import ConfigError
from tcl.jobs.schema import (
    PATH_KEY,
    REQUIRED,
    FieldInfo,
    check_path,
    config_fields,
    declared_fields,
    defaults_tree,
    field,
    join,
    nest,
    schema_of,
)

__all__ = [
    "REQUIRED",
    "RESERVED_KEYS",
    "FieldInfo",
    "build_config",
    "check_keys",
    "configuration",
    "configure",
    "current_config",
    "declared_fields",
    "defaults_tree",
    "field",
    "merge",
    "parse_override",
    "parse_yaml",
    "schema_of",
    "to_yaml",
]

T = TypeVar("T")
RESERVED_KEYS = frozenset({"job"})  # top-level keys the launcher reads, declared by no class


# -- user input -------------------------------------------------------------------------------


def _yaml_lines(text: str) -> dict[str, int]:
    """Line (1-based) of each mapping key in `text`, by '/'-joined path."""
    lines: dict[str, int] = {}

    def walk(node: yaml.Node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                path = join(prefix, str(k.value))
                lines[path] = k.start_mark.line + 1
                walk(v, path)

    with contextlib.suppress(yaml.YAMLError):
        root = yaml.compose(text)
        if root is not None:
            walk(root, "")
    return lines


def parse_yaml(text: str, source: str = "<config>") -> tuple[dict[str, Any], dict[str, int]]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise ConfigError(f"invalid YAML: {e}", key=source, line=line) from e
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("the top level must be a mapping", key=source)
    return data, _yaml_lines(text)


def parse_override(item: str) -> tuple[str, Any]:
    """'training/lr=1e-3' or 'training.lr=1e-3' → ('training/lr', 0.001)."""
    key, sep, raw = item.partition("=")
    if not sep or not key:
        raise ConfigError("an override is KEY=VALUE", key=item)
    path = key.strip().replace(".", "/")
    check_path(path)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"cannot parse value {raw!r}", key=path) from e
    return path, value


def _nearest(path: str, schema: Mapping[str, FieldInfo]) -> str:
    valid = sorted(schema)
    match = difflib.get_close_matches(path, valid, n=1, cutoff=0.4)
    if match:
        return f"; did you mean {match[0]!r}?"
    return f"; valid keys include {', '.join(valid[:6])}"


def check_keys(
    tree: Mapping[str, Any], schema: Mapping[str, FieldInfo], lines: Mapping[str, int] | None = None
) -> None:
    """Every key of `tree` must be declared by a config class (or be reserved)."""
    sections = {"/".join(p.split("/")[:i]) for p in schema for i in range(1, p.count("/") + 1)}

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for k, v in node.items():
            path = join(prefix, str(k))
            if path in schema or (not prefix and path in RESERVED_KEYS):
                continue
            if path in sections and isinstance(v, Mapping):
                walk(v, path)
                continue
            line = (lines or {}).get(path)
            why = "is a section, not a value" if path in sections else "is not declared"
            raise ConfigError(
                why + " by any config class of this job" + _nearest(path, schema),
                key=path,
                line=line,
            )

    walk(tree, "")


def build_config(
    classes: Sequence[type],
    yaml_text: str | None = None,
    overrides: Sequence[str] = (),
    source: str = "<config>",
) -> tuple[DictConfig, DictConfig]:
    """(full tree, explicit tree): defaults ⊕ YAML ⊕ overrides, and only what the user set."""
    schema = schema_of(classes)
    user: dict[str, Any] = {}
    lines: dict[str, int] = {}
    if yaml_text is not None:
        user, lines = parse_yaml(yaml_text, source)
        check_keys(user, schema, lines)
    explicit = OmegaConf.create(user)
    for item in overrides:
        path, value = parse_override(item)
        check_keys(nest({path: value}), schema)
        OmegaConf.update(explicit, path.replace("/", "."), value, force_add=True)
    full = OmegaConf.merge(defaults_tree(schema), explicit)
    assert isinstance(full, DictConfig)
    return full, explicit


# -- the active configuration -----------------------------------------------------------------

_ACTIVE: contextvars.ContextVar[DictConfig | None] = contextvars.ContextVar(
    "tcl_jobs_config", default=None
)


@contextlib.contextmanager
def configuration(cfg: DictConfig | Mapping[str, Any]) -> Iterator[DictConfig]:
    """Make `cfg` the tree that `configure()` and `current_config()` read, for this block."""
    tree = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(dict(cfg))
    token = _ACTIVE.set(tree)
    try:
        yield tree
    finally:
        _ACTIVE.reset(token)


def current_config() -> DictConfig:
    cfg = _ACTIVE.get()
    if cfg is None:
        raise ConfigError("no active configuration: run inside `with configuration(cfg):`")
    return cfg


def _check_type(path: str, value: Any, tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            with contextlib.suppress(ConfigError):
                return _check_type(path, value, arg)
        raise ConfigError(f"{value!r} does not match {tp}", key=path)
    if tp is float and isinstance(value, int | str) and not isinstance(value, bool):
        try:
            return float(value)
        except ValueError:
            pass
    if tp in (int, float, str, bool) and not (
        isinstance(value, tp) and not (tp is int and isinstance(value, bool))
    ):
        raise ConfigError(f"expected {tp.__name__}, got {value!r}", key=path)
    return value


def _value(cfg: DictConfig, path: str) -> Any:
    node: Any = cfg
    for part in path.split("/"):
        if not isinstance(node, DictConfig) or part not in node:
            raise ConfigError("missing from the active configuration", key=path)
        if OmegaConf.is_missing(node, part):
            raise ConfigError("is required and has no value", key=path)
        node = node[part]
    if OmegaConf.is_config(node):
        return OmegaConf.to_container(node, resolve=True)
    return node


def configure(cls: type[T], prefix: str = "") -> T:
    """An instance of the dataclass (or Flax module) `cls` filled from the active
    configuration."""
    cfg = current_config()
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in config_fields(cls, hints):
        path = f.metadata.get(PATH_KEY)
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            kwargs[f.name] = configure(tp, join(prefix, path) if path else prefix)
            continue
        if path is None:
            raise ConfigError(f"{cls.__name__}.{f.name} has no path: use field('a/b', default=...)")
        full = join(prefix, path)
        kwargs[f.name] = _check_type(full, _value(cfg, full), tp)
    return cls(**kwargs)


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg)


def merge(*trees: DictConfig | Mapping[str, Any]) -> DictConfig:
    out = OmegaConf.merge(
        *[OmegaConf.create(dict(t)) if isinstance(t, Mapping) else t for t in trees]
    )
    assert isinstance(out, DictConfig)
    return out
