"""cloud-init user-data from a template: values go into the parsed YAML, never into its text.

The template (``templates/cloud-init.yaml``) is YAML whose placeholders are whole scalars,
``"${name}"``. A placeholder that is an item of a list, with a list for its value, is spliced
into that list (the extra pip requirements, the embedded wheel file); any other is replaced by
its value. The document is written back by a YAML dumper (multi-line strings as literal
blocks) after the template's leading comment lines: ``#cloud-config`` must stay the first line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

_PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


def _value(text: str, values: Mapping[str, Any]) -> Any:
    found = _PLACEHOLDER.fullmatch(text)
    if found is None:
        if _PLACEHOLDER.search(text):
            raise ValueError(f"cloud-init template: {text!r} is not a whole placeholder")
        return text
    return values[found.group(1)]


def fill(node: Any, values: Mapping[str, Any]) -> Any:
    """``node`` (a parsed template) with every ``${name}`` scalar replaced by ``values[name]``."""
    if isinstance(node, str):
        return _value(node, values)
    if isinstance(node, list):
        out: list[Any] = []
        for item in node:
            value = fill(item, values)
            is_splice = isinstance(item, str) and _PLACEHOLDER.fullmatch(item)
            if is_splice and isinstance(value, list):
                out.extend(value)
            else:
                out.append(value)
        return out
    if isinstance(node, dict):
        return {key: fill(value, values) for key, value in node.items()}
    return node


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _str)


def render(template: str, values: Mapping[str, Any]) -> str:
    """The user-data: the template's header comments, then the filled document."""
    header = []
    for line in template.splitlines():
        if not line.startswith("#"):
            break
        header.append(line + "\n")
    doc = fill(yaml.safe_load(template), values)
    body = yaml.dump(
        doc,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=None,
        width=1 << 20,
        allow_unicode=True,
    )
    return "".join(header) + body
