"""Bounded YAML loading for the files a user hands tcl: the config, matrix manifests, job configs.

``yaml.safe_load`` shares the object an alias names, so a "billion laughs" document (each level
a list of ten aliases of the one before) loads in a blink and then grows without bound in
whatever walks it next (validation, an error message's ``repr``, ``json.dumps``). Here the
document is composed into nodes first and their expanded size counted once, linearly (each node
by identity, memoized): aliases that would expand past :data:`MAX_ALIAS_NODES` nodes, a
recursive alias (an anchor inside itself) and nesting too deep for the composer are refused as a
:class:`YamlLimitError`, a ``yaml.MarkedYAMLError`` (so a caller's YAML error handling reports
it, with its line where there is one) before anything is built from the document.
"""

from __future__ import annotations

from typing import Any

import yaml

# Nodes that aliases may add over the document's own (anchors and merge keys as people use
# them add a few hundred; ten aliases nested nine deep would add a billion).
MAX_ALIAS_NODES = 100_000


class YamlLimitError(yaml.MarkedYAMLError):
    """A document refused before it is built: an alias bomb, a recursive alias, deep nesting."""

    def __init__(self, problem: str, mark: yaml.Mark | None = None) -> None:
        super().__init__(problem=problem, problem_mark=mark)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def check_aliases(root: yaml.Node) -> None:
    """Refuse ``root`` if its aliases expand past :data:`MAX_ALIAS_NODES` or loop."""
    size: dict[int, int] = {}  # id(node) -> its expanded size (itself and all below)
    expanding: set[int] = set()  # the nodes on the current path
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            expanding.discard(key)
            total = 1 + sum(size[id(c)] for c in _children(node))
            size[key] = total
            # at most len(size) of its nodes are distinct: the rest came through aliases
            if total - len(size) > MAX_ALIAS_NODES:
                raise YamlLimitError(
                    f"aliases expand to more than {MAX_ALIAS_NODES:,} nodes (an alias bomb?)",
                    node.start_mark,
                )
            continue
        if key in size:
            continue
        if key in expanding:
            raise YamlLimitError(
                "a recursive alias (an anchor used inside itself)", node.start_mark
            )
        expanding.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)


def compose(text: str) -> yaml.Node | None:
    """The document's node tree (None for an empty document), its aliases checked."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
    except RecursionError:
        raise YamlLimitError("nested too deeply") from None
    finally:
        loader.dispose()
    if root is not None:
        check_aliases(root)
    return root


def construct(root: yaml.Node | None) -> Any:
    """The Python value of a node tree from :func:`compose` (safe types only)."""
    if root is None:
        return None
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(root)
    except RecursionError:
        raise YamlLimitError("nested too deeply", root.start_mark) from None
    finally:
        loader.dispose()


def load(text: str) -> Any:
    """``yaml.safe_load`` with the limits above."""
    return construct(compose(text))
