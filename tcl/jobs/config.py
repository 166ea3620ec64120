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
import re
import types
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf

from tcl.jobs.errors import ConfigError

T = TypeVar("T")
_PATH_KEY = "tcl.jobs.path"
_SEGMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
RESERVED_KEYS = frozenset({"job"})  # top-level keys the launcher reads, declared by no class


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


def field(path: str, *, default: Any = REQUIRED, default_factory: Any = None) -> Any:
    """A dataclass field stored at `path` ("a/b/c"); without a default the key is required."""
    _check_path(path)
    meta = {_PATH_KEY: path}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    if default is REQUIRED:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class FieldInfo:
    path: str
    default: Any
    annotation: Any
    owner: str


def _check_path(path: str) -> None:
    if not all(_SEGMENT.match(s) for s in path.split("/")):
        raise ConfigError(
            "a config path is segments of [A-Za-z_][A-Za-z0-9_]* joined by '/'", key=path
        )


def _join(prefix: str, path: str) -> str:
    return f"{prefix}/{path}" if prefix else path


def _default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return REQUIRED


def _is_flax_module(cls: type) -> bool:
    # By name, not isinstance: this module must not import flax (the CLI imports it).
    return any(b.__module__ == "flax.linen.module" and b.__name__ == "Module" for b in cls.__mro__)


def _is_nested(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _config_fields(cls: type, hints: Mapping[str, Any]) -> list[dataclasses.Field[Any]]:
    """The dataclass fields that are config: a Flax module's own attributes (`parent`, `name`,
    and any attribute with a default that is neither a path nor a nested config) are not."""
    if not dataclasses.is_dataclass(cls):
        raise ConfigError(f"{cls!r} is not a dataclass (nor a Flax module)")
    fields = dataclasses.fields(cls)
    if not _is_flax_module(cls):
        return list(fields)
    return [
        f
        for f in fields
        if f.name not in ("parent", "name")
        and (
            f.metadata.get(_PATH_KEY) is not None
            or _is_nested(hints[f.name])
            or _default_of(f) is REQUIRED
        )
    ]


def declared_fields(cls: type, prefix: str = "") -> dict[str, FieldInfo]:
    """Every leaf path `cls` declares; nested dataclass fields are walked at any depth."""
    if not dataclasses.is_dataclass(cls):
        raise ConfigError(f"{cls!r} is not a dataclass (nor a Flax module)")
    hints = typing.get_type_hints(cls)  # resolves string annotations (PEP 563)
    out: dict[str, FieldInfo] = {}
    for f in _config_fields(cls, hints):
        path = f.metadata.get(_PATH_KEY)
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            # A nested config: its paths are relative to this field's path, if it has one.
            sub = declared_fields(tp, _join(prefix, path) if path else prefix)
            out.update(_merge_schemas([out, sub]))
            continue
        if path is None:
            raise ConfigError(f"{cls.__name__}.{f.name} has no path: use field('a/b', default=...)")
        full = _join(prefix, path)
        out = _merge_schemas([out, {full: FieldInfo(full, _default_of(f), tp, cls.__qualname__)}])
    return out


def _merge_schemas(schemas: Iterable[Mapping[str, FieldInfo]]) -> dict[str, FieldInfo]:
    """One schema; a path declared twice keeps the first declaration (and its default), and
    must have the same type in both."""
    merged: dict[str, FieldInfo] = {}
    for schema in schemas:
        for path, info in schema.items():
            seen = merged.get(path)
            if seen is not None and not _same_type(seen.annotation, info.annotation):
                raise ConfigError(
                    f"declared as {_type_name(seen.annotation)} by {seen.owner} and as "
                    f"{_type_name(info.annotation)} by {info.owner}",
                    key=path,
                )
            merged.setdefault(path, info)
    leaves = set(merged)
    for path in leaves:
        parts = path.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in leaves:
                raise ConfigError(
                    f"is both a value and a section ({'/'.join(parts[:i])})", key=path
                )
    return merged


def _without_none(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = tuple(a for a in typing.get_args(tp) if a is not type(None))
        return args[0] if len(args) == 1 else frozenset(args)
    return tp


def _same_type(a: Any, b: Any) -> bool:
    """One path's two declarations agree: the same type, up to Optional (or Any on a side)."""
    if a is Any or b is Any:
        return True
    return bool(a == b or _without_none(a) == _without_none(b))


def _type_name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp)


def schema_of(classes: Sequence[type]) -> dict[str, FieldInfo]:
    """The merged schema of several config classes; conflicting defaults are an error."""
    return _merge_schemas(declared_fields(c) for c in classes)


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path, value in flat.items():
        node = tree
        *parents, leaf = path.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return tree


def defaults_tree(schema: Mapping[str, FieldInfo]) -> DictConfig:
    flat = {p: ("???" if i.default is REQUIRED else i.default) for p, i in schema.items()}
    return OmegaConf.create(_nest(flat))


# -- user input -------------------------------------------------------------------------------


def _yaml_lines(text: str) -> dict[str, int]:
    """Line (1-based) of each mapping key in `text`, by '/'-joined path."""
    lines: dict[str, int] = {}

    def walk(node: yaml.Node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                path = _join(prefix, str(k.value))
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
    _check_path(path)
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
            path = _join(prefix, str(k))
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
        check_keys(_nest({path: value}), schema)
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
    for f in _config_fields(cls, hints):
        path = f.metadata.get(_PATH_KEY)
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            kwargs[f.name] = configure(tp, _join(prefix, path) if path else prefix)
            continue
        if path is None:
            raise ConfigError(f"{cls.__name__}.{f.name} has no path: use field('a/b', default=...)")
        full = _join(prefix, path)
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
