"""Text others control, made safe for a terminal.

A job's output, and the names, commands, hosts and errors a run or a matrix carries, come from
the job or from whoever submitted it (a team's shared database has other users' runs). Written
to a terminal as they are, their escape sequences act on it: OSC 8 hides a link behind other
text, OSC 52 writes the clipboard, cursor moves and a bare carriage return overwrite lines
(a fake ``[tcl] run … succeeded``), a concealing SGR left on hides tcl's own next line. Rich
markup in a name (``[reverse]…``) restyles the table it sits in.

- :func:`terminal_text`: a job's log output. SGR colours stay (and the attributes are reset at
  the end of the chunk); every other escape sequence and control character goes; a bare ``\\r``
  becomes a line break (each overwritten part is shown).
- :func:`plain`: one table cell or line of user-controlled text: no escapes at all, and
  line breaks and tabs become spaces.
- :func:`cell`: :func:`plain` as a rich ``Text``, which rich neither parses for markup nor for
  emoji codes.

``tcl logs --raw`` bypasses :func:`terminal_text`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

_RESET = "\x1b[0m"
_TOKEN = re.compile(
    r"\x1b\[(?P<params>[0-?]*)(?P<inter>[ -/]*)(?P<final>[@-~])"  # CSI
    r"|\x1b[\]PX^_].*?(?:\x07|\x1b\\|\Z)"  # OSC, DCS, SOS, PM, APC: up to BEL or ST
    r"|\x1b[ -/]*[0-~]"  # any other escape (charset, save/restore cursor, reset)
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f]",  # other C0 (a lone ESC too), DEL, C1 (8-bit CSI)
    re.DOTALL,
)
_SGR_PARAMS = re.compile(r"[0-9;:]*")
# Any character _TOKEN could start with (ESC, a C0 but tab and line feed, DEL, C1); output with
# none (most of it) is written as it is, found five times faster than _TOKEN's scan would.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _is_sgr(m: re.Match[str]) -> bool:
    return (
        m.group("final") == "m"
        and not m.group("inter")
        and _SGR_PARAMS.fullmatch(m.group("params")) is not None
    )


def terminal_text(text: str) -> str:
    """A job's output chunk as it may be written to a terminal (see the module docstring)."""
    if _CONTROL.search(text) is None:
        return text  # no escape, no carriage return: nothing to change
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    kept = False

    def keep(m: re.Match[str]) -> str:
        nonlocal kept
        if _is_sgr(m):
            kept = True
            return m.group(0)
        return ""

    text = _TOKEN.sub(keep, text)
    if not kept:
        return text
    # the reset goes before a final line break: a prefix per line (timestamps) sees no new line
    return text[:-1] + _RESET + "\n" if text.endswith("\n") else text + _RESET


def plain(text: str) -> str:
    """User-controlled text for one line or cell: every control sequence removed, line breaks
    and tabs turned into spaces."""
    text = re.sub(r"\r\n|[\r\n\t]", " ", text)
    return _TOKEN.sub("", text)


def cell(text: str) -> Text:
    """:func:`plain` as a rich ``Text``: shown literally (no markup, no emoji codes)."""
    from rich.text import Text

    return Text(plain(text))
