"""The config's error lines: where in the file each error is (``source:line: key.path:
message``), and the references a config makes to names it must define (checked on the raw
mapping, so every one is reported beside the schema's errors)."""

from __future__ import annotations

from typing import Any

import yaml


class RefError(ValueError):
    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc
        self.message = message


def path_of(loc: tuple[str | int, ...]) -> str:
    return ".".join(str(p) for p in loc) or "(top level)"


def reference_errors(data: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    """Every name the config refers to that it does not define: a host's ``cluster``, a
    ``priority`` entry, a ``prefer`` or ``avoid`` cluster. On the raw mapping (any of it may
    be malformed)."""
    clusters = data.get("clusters")
    hosts = data.get("hosts")
    cluster_names = set(clusters) if isinstance(clusters, dict) else set()
    host_names = set(hosts) if isinstance(hosts, dict) else set()
    out: list[tuple[tuple[str | int, ...], str]] = []
    for name, host in hosts.items() if isinstance(hosts, dict) else ():
        cluster = host.get("cluster") if isinstance(host, dict) else None
        if isinstance(cluster, str) and cluster not in cluster_names:
            out.append((("hosts", name, "cluster"), f"unknown cluster {cluster!r}"))
    priority = data.get("priority")
    for i, name in enumerate(priority if isinstance(priority, list) else ()):
        if isinstance(name, str) and name not in host_names:
            out.append((("priority", i), f"unknown host {name!r}"))
    for key in ("prefer", "avoid"):
        names = data.get(key)
        for i, name in enumerate(names if isinstance(names, list) else ()):
            if isinstance(name, str) and name not in cluster_names:
                known = ", ".join(sorted(cluster_names)) or "none"
                out.append(((key, i), f"unknown cluster {name!r} (clusters: {known})"))
    return out


def user_loc(loc: tuple[Any, ...], err_type: str) -> tuple[str | int, ...]:
    # A discriminated union puts the tag (the host type) into the location: hosts.NAME.TAG.key.
    if len(loc) >= 3 and loc[0] == "hosts" and not err_type.startswith("union_tag"):
        loc = (*loc[:2], *loc[3:])
    return tuple(p for p in loc if isinstance(p, str | int))


def message(err: Any) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key (typo?)"
    if kind == "missing":
        return "required key is missing"
    if kind == "union_tag_invalid":
        return f"unknown host type {err['input'].get('type')!r} (local, ssh, slurm, tpu, volcano)"
    if kind == "union_tag_not_found":
        return "missing key 'type' (local, ssh, slurm, tpu, volcano)"
    if kind == "value_error":  # our own validators' words say what is wrong already
        return str(err["msg"]).removeprefix("Value error, ")
    return f"{err['msg']} (got {err['input']!r})"


def line_of(root: yaml.Node | None, loc: tuple[str | int, ...]) -> int:
    """1-based line of the deepest node of ``loc`` that exists in the file."""
    if root is None:
        return 1
    node: yaml.Node = root
    line = node.start_mark.line + 1
    for part in loc:
        child: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                    child, line = value, key.start_mark.line + 1
                    break
        elif (
            isinstance(node, yaml.SequenceNode)
            and isinstance(part, int)
            and 0 <= part < len(node.value)
        ):
            child = node.value[part]
            line = child.start_mark.line + 1
        if child is None:
            break
        node = child
    return line
