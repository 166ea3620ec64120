"""The schema of a job's config: `field()` declarations walked into {path: FieldInfo}.

Config classes are dataclasses whose fields carry a path (`field("a/b", default=...)`), nested
config dataclasses (paths relative to the field's), and Flax modules whose settings are such
fields (seed 001's `MODEL`). Several classes' schemas merge into one: a path declared twice keeps
the first declaration and its default, and must have one type. No JAX here.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from tcl.jobs.errors import ConfigError

PATH_KEY = "tcl.jobs.path"
_SEGMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


def field(path: str, *, default: Any = REQUIRED, default_factory: Any = None) -> Any:
    """A dataclass field stored at `path` ("a/b/c"); without a default the key is required."""
    check_path(path)
    meta = {PATH_KEY: path}
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


def check_path(path: str) -> None:
    if not all(_SEGMENT.match(s) for s in path.split("/")):
        raise ConfigError(
            "a config path is segments of [A-Za-z_][A-Za-z0-9_]* joined by '/'", key=path
        )


def join(prefix: str, path: str) -> str:
    return f"{prefix}/{path}" if prefix else path


def default_of(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return REQUIRED


def _is_flax_module(cls: type) -> bool:
    # By name, not isinstance: this module must not import flax (the CLI imports it).
    return any(b.__module__ == "flax.linen.module" and b.__name__ == "Module" for b in cls.__mro__)


def is_nested(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def config_fields(cls: type, hints: Mapping[str, Any]) -> list[dataclasses.Field[Any]]:
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
            f.metadata.get(PATH_KEY) is not None
            or is_nested(hints[f.name])
            or default_of(f) is REQUIRED
        )
    ]


def declared_fields(cls: type, prefix: str = "") -> dict[str, FieldInfo]:
    """Every leaf path `cls` declares; nested dataclass fields are walked at any depth."""
    if not dataclasses.is_dataclass(cls):
        raise ConfigError(f"{cls!r} is not a dataclass (nor a Flax module)")
    hints = typing.get_type_hints(cls)  # resolves string annotations (PEP 563)
    out: dict[str, FieldInfo] = {}
    for f in config_fields(cls, hints):
        path = f.metadata.get(PATH_KEY)
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            # A nested config: its paths are relative to this field's path, if it has one.
            sub = declared_fields(tp, join(prefix, path) if path else prefix)
            out.update(_merge_schemas([out, sub]))
            continue
        if path is None:
            raise ConfigError(f"{cls.__name__}.{f.name} has no path: use field('a/b', default=...)")
        full = join(prefix, path)
        out = _merge_schemas([out, {full: FieldInfo(full, default_of(f), tp, cls.__qualname__)}])
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


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
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
    return OmegaConf.create(nest(flat))
