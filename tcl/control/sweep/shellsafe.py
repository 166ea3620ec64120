"""How an entry's values reach its command without ever becoming shell code.

Three safe forms, checked when a matrix is added and again when an entry is placed:

* a placeholder that is a whole argv element (``{lr}``): the value is that element as it is;
  a shell script reads it as a positional parameter (``bash -c 'train --lr "$1"' _ {lr}``);
* every field in the run's environment as ``TCL_FIELD_<NAME>`` (``"$TCL_FIELD_LR"``);
* a placeholder in plain (unquoted) shell text of a longer element
  (``bash -c "train --lr {lr}"``): the value is ``shlex.quote``-d, one literal word.

Anywhere a shell would read a quoted value as anything but one literal word (inside ``'...'``,
``"..."``, backquotes, ``${...}``, ``$((...))``, a comment, a here-document, after ``\\`` or
``$``) the template is refused: :func:`unsafe_placeholder` lexes the element's literal text the
way a POSIX shell would, enough to know the context at each placeholder. So is a placeholder
that is the whole script of a shell's ``-c`` (:func:`script_placeholder`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tcl.control.errors import SweepError

ENV_PREFIX = "TCL_FIELD_"
JOB_ID = "job_id"  # exported as TCL_MATRIX_JOB_ID, not as a field

# where a placeholder may stand: shell text outside quotes, also inside $( ... )
_PLAIN, _SUB = "plain", "sub"
_WHY = {
    "sq": "inside single quotes",
    "ansi": "inside $'...' quotes",
    "dq": "inside double quotes",
    "bq": "inside backquotes",
    "brace": "inside ${...}",
    "arith": "inside $((...))",
    "comment": "in a shell comment",
}
_WORD_BREAK = frozenset(" \t\n;&|()<>")


def env_name(key: str) -> str:
    """``TCL_FIELD_`` and the key in upper case, each character outside ``[A-Za-z0-9_]`` an
    underscore: ``optim.lr`` → ``TCL_FIELD_OPTIM_LR``."""
    return ENV_PREFIX + re.sub(r"[^A-Za-z0-9_]", "_", key).upper()


def field_env(fields: Mapping[str, Any]) -> dict[str, str]:
    """Each field (``job_id`` aside) as ``TCL_FIELD_<NAME>``, its value by ``value_text``;
    two fields with one name, or a value with a NUL byte, are refused."""
    from tcl.control.sweep.manifest import value_text

    env: dict[str, str] = {}
    owner: dict[str, str] = {}
    for key, value in fields.items():
        if key == JOB_ID:
            continue
        name = env_name(key)
        if name in owner:
            raise SweepError(
                f"the fields {owner[name]!r} and {key!r} are both {name} in the environment: "
                "rename one"
            )
        text = value_text(value)
        if "\0" in text:
            raise SweepError(f"the field {key!r} holds a NUL byte (not allowed in a value)")
        owner[name], env[name] = key, text
    return env


def check_field_env(entries: Iterable[Mapping[str, Any]]) -> None:
    """:func:`field_env` of every entry (so a clash is refused before anything is added)."""
    for entry in entries:
        try:
            field_env(entry)
        except SweepError as e:
            raise SweepError(f"entry {entry.get(JOB_ID)!r}: {e}") from None


@dataclass
class _Lexer:
    """The shell context at each point of an element's literal text."""

    stack: list[list[Any]] = field(default_factory=lambda: [[_PLAIN, 0]])  # [kind, paren depth]
    heredoc: bool = False
    prev: str | None = None  # the last character seen (None: the start of the element)

    def feed(self, text: str) -> str | None:
        """Read ``text``; return why a placeholder right after it would be unsafe, or None."""
        i = 0
        while i < len(text):
            c, nxt = text[i], text[i + 1 : i + 2]
            top = self.stack[-1]
            kind = top[0]
            if c == "\\" and kind not in ("sq", "comment"):
                if not nxt:
                    return "after a backslash"
                self.prev = nxt
                i += 2
                continue
            i += self._step(c, text[i + 1 : i + 3], top)
            self.prev = c
        kind = self.stack[-1][0]
        if kind not in (_PLAIN, _SUB):
            return _WHY[kind]
        if self.heredoc:
            return "in a here-document"
        if text.endswith("$"):
            return "right after a $"
        return None

    def _step(self, c: str, ahead: str, top: list[Any]) -> int:
        """Move on past ``c`` (``ahead``: the next two characters); how many were read."""
        kind = top[0]
        if kind == "sq" or kind == "ansi":
            if c == "'":
                self.stack.pop()
        elif kind == "comment":
            if c == "\n":
                self.stack.pop()
        elif kind == "bq":
            if c == "`":
                self.stack.pop()
        elif kind == "arith":
            if c == "(":
                top[1] += 1
            elif c == ")" and top[1]:
                top[1] -= 1
            elif c == ")" and ahead[:1] == ")":
                self.stack.pop()
                return 2
        elif c == "$" and ahead[:1] in ("(", "{", "'", '"'):
            return 1 + self._dollar(ahead)
        elif kind == "dq":
            if c == '"':
                self.stack.pop()
            elif c == "`":
                self.stack.append(["bq", 0])
        elif kind == "brace" and c == "}":
            self.stack.pop()
        elif c == "'":
            self.stack.append(["sq", 0])
        elif c == '"':
            self.stack.append(["dq", 0])
        elif c == "`":
            self.stack.append(["bq", 0])
        elif kind in (_PLAIN, _SUB):
            self._plain(c, ahead, top)
        return 1

    def _dollar(self, ahead: str) -> int:
        """``$`` then ``ahead``: push what it opens; how many characters of ``ahead`` it took."""
        kind = self.stack[-1][0]
        if ahead.startswith("(("):
            self.stack.append(["arith", 0])
            return 2
        if ahead[0] == "(":
            self.stack.append([_SUB, 0])
        elif ahead[0] == "{":
            self.stack.append(["brace", 0])
        elif kind == "dq":
            return 0  # "$'" and '$"' inside double quotes are plain characters
        elif ahead[0] == "'":
            self.stack.append(["ansi", 0])
        else:
            self.stack.append(["dq", 0])
        return 1

    def _plain(self, c: str, ahead: str, top: list[Any]) -> None:
        if c == "#" and (self.prev is None or self.prev in _WORD_BREAK):
            self.stack.append(["comment", 0])
        elif c == "<" and ahead[:1] == "<":
            self.heredoc = True
        elif c == "(":
            top[1] += 1
        elif c == ")":
            if top[1]:
                top[1] -= 1
            elif top[0] == _SUB:
                self.stack.pop()

    def placeholder(self) -> None:
        self.prev = "x"  # a quoted value is a word


def unsafe_placeholder(pieces: Sequence[tuple[str, str | None]]) -> tuple[str, str] | None:
    """The first placeholder of an element (``(literal, field or None)`` pieces, as
    ``string.Formatter`` parses it) that stands where a quoted value could still run as shell,
    and why; None when each is safe. An element that is one placeholder is always safe."""
    if len(pieces) == 1 and pieces[0][0] == "" and pieces[0][1] is not None:
        return None
    lexer = _Lexer()
    for literal, name in pieces:
        why = lexer.feed(literal)
        if name is None:
            continue
        if why is not None:
            return name, why
        lexer.placeholder()
    return None


_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh"})
_SCRIPT_FLAG = re.compile(r"-[A-Za-z]*c[A-Za-z]*")  # -c, -lc, -ec, -xc


def script_placeholder(template: Sequence[str], whole: Sequence[str | None]) -> int | None:
    """The index of an element that is one placeholder (``whole[i]``: its field) standing as
    the script of a shell's ``-c`` (``bash -c {cmd}``, ``env A=1 sh -ec {cmd}``): its value
    would be the shell code itself."""
    shell = False
    for i, element in enumerate(template):
        if whole[i] is not None and shell and i and _SCRIPT_FLAG.fullmatch(template[i - 1]):
            return i
        shell = shell or element.rsplit("/", 1)[-1] in _SHELLS
    return None


def refusal(element: str, name: str, why: str) -> SweepError:
    """The error for a placeholder at an unsafe place, showing the safe forms."""
    env = env_name(name)
    return SweepError(
        f"argv element {element!r}: the placeholder {{{name}}} is {why}, where a value could run "
        f"as shell code. Pass it as data instead: read it from the environment "
        f"(bash -c '... \"${env}\"'; every field is exported as TCL_FIELD_<NAME>), give it as "
        f"its own argument (bash -c '... \"$1\"' _ {{{name}}}), or leave it unquoted in the "
        f'command string (bash -c "... {{{name}}}": tcl quotes it as one word)'
    )
