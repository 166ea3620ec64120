"""Request bodies checked against the Cloud TPU v2 discovery document.

The document ships in google-api-python-client (``discovery_cache/documents/tpu.v2.json``).
Unknown fields, wrong JSON types and unknown enum values give the messages Google's JSON
transcoder gives (``Invalid JSON payload received. Unknown name "foo" at 'node': Cannot find
field.``). Enums may arrive as numbers (the python client asks for ``enum-encoding=int``); they
are turned into names with the proto descriptors of ``google.cloud.tpu_v2``, because the
discovery document lists names only. Output-only (``readOnly``) fields are dropped, as the
service ignores them on input.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import googleapiclient
from google.cloud import tpu_v2

from tests.tpuemu.errors import ApiError, bad_request

DOC_PATH = Path(googleapiclient.__file__).parent / "discovery_cache" / "documents" / "tpu.v2.json"


@functools.cache
def schemas() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DOC_PATH.read_text())
    return dict(doc["schemas"])


def _snake(name: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)


def _enum_name(schema: str, field: str, number: int) -> str | None:
    cls = getattr(tpu_v2, schema, None)
    if cls is None:
        return None
    fd = cls.pb().DESCRIPTOR.fields_by_camelcase_name.get(field)
    if fd is None or fd.enum_type is None:
        return None
    value = fd.enum_type.values_by_number.get(number)
    return None if value is None else str(value.name)


class _Checker:
    def __init__(self) -> None:
        self.violations: list[str] = []

    def message(self, value: Any, schema: str, path: str) -> dict[str, Any]:
        props: dict[str, Any] = schemas()[schema].get("properties", {})
        if not isinstance(value, dict):
            self.violations.append(
                f"Invalid value at '{path}' (type.googleapis.com/google.cloud.tpu.v2.{schema}), "
                f"{json.dumps(value)}"
            )
            return {}
        out: dict[str, Any] = {}
        for key, item in value.items():
            prop = props.get(key)
            if prop is None:
                self.violations.append(
                    f"Invalid JSON payload received. Unknown name \"{key}\" at '{path}': "
                    "Cannot find field."
                )
                continue
            checked = self.field(item, prop, schema, key, f"{path}.{_snake(key)}")
            if not prop.get("readOnly", False):
                out[key] = checked
        return out

    def field(self, value: Any, prop: dict[str, Any], schema: str, key: str, path: str) -> Any:
        if value is None:
            return None
        if "$ref" in prop:
            return self.message(value, prop["$ref"], path)
        kind = prop.get("type")
        if kind == "array":
            if not isinstance(value, list):
                return self._bad(path, "list", value)
            return [self.field(v, prop["items"], schema, key, path) for v in value]
        if kind == "object":
            if not isinstance(value, dict):
                return self._bad(path, "map", value)
            extra = prop.get("additionalProperties", {"type": "any"})
            return {k: self.field(v, extra, schema, key, f"{path}[{k}]") for k, v in value.items()}
        if "enum" in prop:
            return self._enum(value, prop["enum"], schema, key, path)
        if kind == "string":
            if prop.get("format") in ("int64", "uint64") and isinstance(value, int):
                return str(value)
            return value if isinstance(value, str) else self._bad(path, "TYPE_STRING", value)
        if kind == "integer":
            ok = isinstance(value, int) and not isinstance(value, bool)
            if isinstance(value, str) and re.fullmatch(r"-?\d+", value):
                return int(value)
            return value if ok else self._bad(path, "TYPE_INT32", value)
        if kind == "number":
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            return value if ok else self._bad(path, "TYPE_DOUBLE", value)
        if kind == "boolean":
            return value if isinstance(value, bool) else self._bad(path, "TYPE_BOOL", value)
        return value  # "any"

    def _enum(self, value: Any, names: list[str], schema: str, key: str, path: str) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            name = _enum_name(schema, key, value)
            if name is not None:
                return name
        elif isinstance(value, str) and value in names:
            return value
        return self._bad(path, f"type.googleapis.com/google.cloud.tpu.v2.{schema}.{key}", value)

    def _bad(self, path: str, kind: str, value: Any) -> None:
        self.violations.append(f"Invalid value at '{path}' ({kind}), {json.dumps(value)}")


def check(body: Any, schema: str, path: str) -> dict[str, Any]:
    """``body`` checked against ``schema``, enums as names, output-only fields dropped.

    ``path`` is the request field the body fills (``node``, ``queued_resource``), as Google's
    messages name it. Raises 400 INVALID_ARGUMENT listing every violation.
    """
    checker = _Checker()
    out = checker.message(body, schema, path)
    if checker.violations:
        raise bad_request(checker.violations)
    return out


def parse_json(raw: bytes) -> Any:
    """The request body as JSON; a syntax error is a 400 as Google gives it."""
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except ValueError as e:
        raise ApiError(
            "INVALID_ARGUMENT", f"Invalid JSON payload received. Unexpected token.\n{e}"
        ) from None
