"""gitignore-style patterns for ``.tclignore`` (also used for plain directories without git).

Supported: comments, blank lines, ``!`` negation (last match wins), a trailing ``/`` (directories
only), a leading or inner ``/`` (anchored at the root), ``*``, ``?``, ``[...]`` and ``**``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

IGNORE_FILE = ".tclignore"


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


def _translate(glob: str) -> str:
    out, i = [], 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("/**", i) and i + 3 == len(glob):
            out.append("/.*")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = glob.find("]", i + 1)
            if j == -1:
                out.append(re.escape(c))
                i += 1
            else:
                body = glob[i + 1 : j].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


class IgnoreRules:
    """A compiled list of patterns, matched against POSIX paths relative to the root."""

    def __init__(self, lines: list[str]) -> None:
        self._rules: list[_Rule] = []
        for raw in lines:
            line = raw.rstrip("\n").rstrip()
            if not line or line.startswith("#"):
                continue
            negate = line.startswith("!")
            if negate:
                line = line[1:]
            dir_only = line.endswith("/")
            line = line.rstrip("/")
            anchored = "/" in line
            line = line.lstrip("/")
            prefix = "" if anchored else "(?:.*/)?"
            regex = re.compile(f"^{prefix}{_translate(line)}$")
            self._rules.append(_Rule(regex, negate, dir_only))

    @classmethod
    def from_dir(cls, root: Path) -> IgnoreRules:
        path = root / IGNORE_FILE
        return cls(path.read_text().splitlines() if path.is_file() else [])

    def __bool__(self) -> bool:
        return bool(self._rules)

    def _match(self, rel: str, is_dir: bool) -> bool | None:
        verdict: bool | None = None
        for rule in self._rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.match(rel):
                verdict = not rule.negate
        return verdict

    def ignored(self, rel: str, is_dir: bool = False) -> bool:
        """Whether ``rel`` (or any of its parent directories) is ignored."""
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            if self._match("/".join(parts[:depth]), True):
                return True
        return bool(self._match(rel, is_dir))
