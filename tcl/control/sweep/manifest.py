"""A matrix's entries from what the user gives: a manifest file, ``--grid`` specs, ``--where``
filters; and what each entry runs: its argv filled from a template, or its job's config.

Pure functions (the one I/O is reading the manifest). Every bad input raises one
:class:`SweepError` that names the file, spec, entry or field at fault, before anything is added.

An entry is a dict: ``job_id`` (a non-empty string, unique in its matrix) and any other fields.

A value's *text* (:func:`value_text`) is how it reads on a command line: ``42``, ``0.001``,
``true``, ``spanish``. Generated job ids, ``--where`` comparisons and filled argv elements all use
it, so what the user types round-trips.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import string
from collections import Counter
from collections.abc import Sequence
from itertools import product
from pathlib import Path
from typing import Any

import yaml

from tcl.control import yamlsafe
from tcl.control.errors import SweepError
from tcl.control.sweep.shellsafe import refusal, script_placeholder, unsafe_placeholder

JOB_ID = "job_id"
MAX_ENTRY_BYTES = 64 * 1024  # an entry's fields as compact JSON (they go to every run's env)
_NAMED_AT_MOST = 10  # an error lists this many job ids, then "and N more"

_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")


def _some(names: Sequence[str]) -> str:
    """``a, b, c`` or ``a, b, ... and 7 more``."""
    shown = ", ".join(names[:_NAMED_AT_MOST])
    rest = len(names) - _NAMED_AT_MOST
    return f"{shown} and {rest} more" if rest > 0 else shown


# values ------------------------------------------------------------------------------------


def parse_value(text: str) -> int | float | bool | str:
    """What a user means by ``text``: ``42`` an int, ``1e-3`` / ``0.5`` a float, ``true`` /
    ``false`` (any case) a bool; anything else (``nan``, ``inf``, ``1_000`` included) the string
    itself."""
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def value_text(value: Any) -> str:
    """A value as it reads on a command line: bools ``true``/``false``, floats by ``repr``
    (``0.001``, ``1e-05``), null ``null``, lists and objects as compact JSON, else ``str``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list | dict):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return str(value)


# manifest files ----------------------------------------------------------------------------


def _read_document(path: Path) -> Any:
    try:
        text = path.read_text()
    except OSError as e:
        raise SweepError(f"{path}: cannot read the manifest: {e.strerror or e}") from None
    if not text.strip():
        raise SweepError(f"{path}: the manifest is empty (expected a list of entries)")
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise SweepError(f"{path}:{e.lineno}: not valid JSON: {e.msg}") from None
        except RecursionError:
            raise SweepError(f"{path}: not valid JSON: nested too deeply") from None
    try:  # YAML (a JSON document is YAML too), its aliases bounded
        return yamlsafe.load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise SweepError(f"{path}{where}: not valid YAML: {problem}") from None


def _size(item: dict[Any, Any]) -> int:
    """An entry's size as compact JSON (its ``repr`` where JSON cannot hold a key)."""
    try:
        return len(json.dumps(item, separators=(",", ":"), default=str))
    except (TypeError, ValueError):
        return len(repr(item))


def load_manifest(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The entries of a manifest: a JSON (``.json``) or YAML file holding a list of objects,
    each with a ``job_id`` and any other fields (the seed's ``matrix.json`` is one). Entries keep
    the file's order; each is a copy of its object."""
    file = Path(path)
    doc = _read_document(file)
    if not isinstance(doc, list):
        raise SweepError(
            f"{file}: a manifest is a list of entries (objects), not a {type(doc).__name__}"
        )
    problems: list[str] = []
    for i, item in enumerate(doc):
        if not isinstance(item, dict):
            problems.append(f"entry {i} is not an object (a {type(item).__name__})")
        elif not isinstance(item.get(JOB_ID), str) or not item[JOB_ID].strip():
            got = "missing" if JOB_ID not in item else f"{item[JOB_ID]!r}"
            problems.append(f"entry {i} has no job_id (a non-empty string; got {got})")
        else:
            size = _size(item)
            if size > MAX_ENTRY_BYTES:
                problems.append(
                    f"entry {i} ({item[JOB_ID]!r}) is {size / 1024:.0f} KiB, over the "
                    f"{MAX_ENTRY_BYTES // 1024} KiB an entry may hold"
                )
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise SweepError(f"{file}: " + "; ".join(problems[:5]) + more)
    entries = [dict(item) for item in doc]
    seen = Counter(e[JOB_ID] for e in entries)
    dups = [job_id for job_id, n in seen.items() if n > 1]
    if dups:
        raise SweepError(
            f"{file}: {len(dups)} job_id(s) appear more than once (nothing added): {_some(dups)}"
        )
    return entries


# --grid ------------------------------------------------------------------------------------


def _grid_axis(spec: str) -> tuple[str, list[Any]]:
    key, eq, values = spec.partition("=")
    key = key.strip()
    if not eq or not key:
        raise SweepError(f"--grid {spec!r}: expected KEY=V1,V2,... (e.g. lr=1e-3,3e-4)")
    if key == JOB_ID:
        raise SweepError(f"--grid {spec!r}: job_id is made from the other keys; not a grid key")
    texts = [v.strip() for v in values.split(",")]
    if not values.strip() or any(not t for t in texts):
        raise SweepError(f"--grid {spec!r}: an empty value (expected KEY=V1,V2,...)")
    parsed = [parse_value(t) for t in texts]
    counts = Counter(value_text(v) for v in parsed)
    twice = [t for t, n in counts.items() if n > 1]
    if twice:
        raise SweepError(f"--grid {spec!r}: the same value twice: {', '.join(twice)}")
    return key, parsed


def grid(specs: Sequence[str]) -> list[dict[str, Any]]:
    """The cartesian product of ``--grid KEY=V1,V2,...`` specs (values by :func:`parse_value`).

    Each entry's ``job_id`` is ``key=value`` pairs joined by ``,`` in the order the specs were
    given, each value by :func:`value_text` (``lr=0.001,seed=1``): stable (the same specs give
    the same ids, so adding them again adds nothing), readable, and unique (a key appears once
    and its values' texts differ). Entries come in product order (the last spec varies fastest).
    """
    axes: list[tuple[str, list[Any]]] = []
    for spec in specs:
        key, values = _grid_axis(spec)
        if any(key == k for k, _ in axes):
            raise SweepError(f"--grid {spec!r}: the key {key!r} is given twice")
        axes.append((key, values))
    if not axes:
        return []
    keys = [k for k, _ in axes]
    out: list[dict[str, Any]] = []
    for combo in product(*(values for _, values in axes)):
        fields = dict(zip(keys, combo, strict=True))
        job_id = ",".join(f"{k}={value_text(v)}" for k, v in fields.items())
        out.append({JOB_ID: job_id, **fields})
    return out


# --where -----------------------------------------------------------------------------------


def where(entries: Sequence[dict[str, Any]], filters: Sequence[str]) -> list[dict[str, Any]]:
    """The entries every ``KEY=V`` filter keeps (``KEY=A,B``: either value). Values compare by
    :func:`value_text`, the filter's parsed first (``lr=1e-3`` keeps ``0.001``). An entry
    without the key is dropped; a key no entry has is an error."""
    known = {k for e in entries for k in e}
    wanted: list[tuple[str, set[str]]] = []
    for f in filters:
        key, eq, values = f.partition("=")
        key = key.strip()
        if not eq or not key or not values.strip():
            raise SweepError(f"--where {f!r}: expected KEY=VALUE or KEY=V1,V2 (e.g. method=fft)")
        if entries and key not in known:
            raise SweepError(
                f"--where {f!r}: no entry has the field {key!r} "
                f"(fields: {', '.join(sorted(known))})"
            )
        wanted.append((key, {value_text(parse_value(v.strip())) for v in values.split(",")}))
    return [
        e for e in entries if all(key in e and value_text(e[key]) in texts for key, texts in wanted)
    ]


# argv templates ----------------------------------------------------------------------------


_FORMATTER = string.Formatter()


def _pieces(element: str) -> list[tuple[str, str | None, str, str | None]]:
    """``string.Formatter`` parsing, its errors named by the element."""
    try:
        parsed = list(_FORMATTER.parse(element))
    except ValueError as e:
        raise SweepError(
            f"argv element {element!r}: {e} (write {{{{ or }}}} for a brace)"
        ) from None
    pieces = [(lit, name, spec or "", conv) for lit, name, spec, conv in parsed]
    for _, name, _, _ in pieces:
        if name is not None and (not name or name.isdigit()):
            raise SweepError(f"argv element {element!r}: a placeholder needs a field name")
    unsafe = unsafe_placeholder([(lit, name) for lit, name, _, _ in pieces])
    if unsafe is not None:
        raise refusal(element, *unsafe)
    return pieces


def _parsed(template: Sequence[str]) -> list[list[tuple[str, str | None, str, str | None]]]:
    """Each element's pieces; a template where a value would be a shell's script is refused."""
    parsed = [_pieces(element) for element in template]
    whole = [p[0][1] if len(p) == 1 and p[0][0] == "" else None for p in parsed]
    i = script_placeholder(template, whole)
    if i is not None:
        raise refusal(template[i], str(whole[i]), f"the script of `{' '.join(template[:i])}`")
    return parsed


def template_fields(template: Sequence[str]) -> list[str]:
    """The fields an argv template names (``job_id`` included when named), first use first."""
    names: dict[str, None] = {}
    for pieces in _parsed(template):
        for _, name, _, _ in pieces:
            if name is not None:
                names.setdefault(name)
    return list(names)


def fill_argv(template: Sequence[str], fields: dict[str, Any], job_id: str) -> list[str]:
    """The argv template with each ``{field}`` replaced by the entry's value (its
    :func:`value_text`, or ``format(value, spec)`` for ``{field:spec}``); ``{job_id}`` is
    always available; ``{{`` and ``}}`` are literal braces. A field name is a whole key
    (``{optim.lr}`` is the field ``optim.lr``).

    Quoting: an element that is exactly one placeholder (``"{lr}"``) becomes the value as it is:
    the argv runs as a list, so no shell sees it. In any other element (``"--lr={lr}"``, or the
    command string of ``["bash", "-c", "python train.py --lr {lr}"]``) each value is
    ``shlex.quote``d, so a shell reading the string gets it as one word; values made only of
    letters, digits and ``@%+=:,./-_`` (numbers, names, paths) read the same quoted or not. A
    placeholder where a quoted value could still run (inside shell quotes, a comment, ...) is
    refused (:mod:`tcl.control.sweep.shellsafe`); the run's environment has every field as
    ``TCL_FIELD_<NAME>`` instead.
    """
    values = {**fields, JOB_ID: job_id}
    out: list[str] = []
    for element, pieces in zip(template, _parsed(template), strict=True):
        alone = len(pieces) == 1 and pieces[0][0] == "" and pieces[0][1] is not None
        parts: list[str] = []
        for literal, name, spec, conv in pieces:
            parts.append(literal)
            if name is None:
                continue
            if name not in values:
                raise SweepError(f"entry {job_id!r} has no field {name!r} (argv {element!r})")
            value = values[name]
            if conv is not None:
                value = _FORMATTER.convert_field(value, conv)
            text = format(value, spec) if spec else value_text(value)
            parts.append(text if alone else shlex.quote(text))
        out.append("".join(parts))
    return out


def check_template(template: Sequence[str], entries: Sequence[dict[str, Any]]) -> None:
    """Every entry has every field the template names; else one error listing, per missing
    field, the job ids that lack it."""
    needed = [f for f in template_fields(template) if f != JOB_ID]
    lacking = {f: [str(e.get(JOB_ID)) for e in entries if f not in e] for f in needed}
    lacking = {f: ids for f, ids in lacking.items() if ids}
    if lacking:
        parts = [
            f"{f!r} (missing in {len(ids)} of {len(entries)}: {_some(ids)})"
            for f, ids in lacking.items()
        ]
        raise SweepError(
            "the command template names fields some entries lack (nothing added): "
            + "; ".join(parts)
        )


# tcl.jobs configs --------------------------------------------------------------------------


def job_config(base_yaml: str, fields: dict[str, Any]) -> str:
    """A ``tcl.jobs`` job's config YAML with the entry's fields set over ``base_yaml`` (a
    dotted key such as ``optim.lr`` sets a nested value; ``job_id`` is not set). OmegaConf is
    imported here: only a matrix of ``tcl.jobs`` jobs needs it, not every daemon's start."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        base = yamlsafe.load(base_yaml) if base_yaml.strip() else {}
    except yaml.YAMLError as e:
        raise SweepError(f"the job's base config is not valid YAML: {e}") from None
    if not isinstance(base, dict):
        raise SweepError(f"the job's base config is a {type(base).__name__}, not a mapping")
    try:
        cfg = OmegaConf.create(base)
        assert isinstance(cfg, DictConfig)
        for key, value in fields.items():
            if key != JOB_ID:
                OmegaConf.update(cfg, key, value, merge=True, force_add=True)
        return OmegaConf.to_yaml(cfg)
    except OmegaConfBaseException as e:
        raise SweepError(f"cannot set the entry's fields on the job config: {e}") from None
