"""Config value types for what reaches a generated file or another program's command line.

A host's ``ssh``/``user``/``proxy_jump`` land in the ssh config ``tcl ssh`` writes and in ssh's
argv; ``shim_dir``/``shim_venv``/``fake_accelerators`` in the systemd unit ``tcl host setup``
installs. A newline there adds a line (a ``ProxyCommand``, an ``ExecStartPre``) and a leading
``-`` turns a value into an option, so each is checked when the config loads: its error names
the key and line like every config error. The writers check again (:func:`plain_path`,
:func:`no_control`), for values that come from elsewhere (a cloud API, a placement record).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

# Paths that go into a systemd unit verbatim: no spaces, quotes, %, $ or newlines.
PLAIN_PATH = re.compile(r"/[A-Za-z0-9._/+-]*")
_SHIM_PATH = re.compile(r"~|~/[A-Za-z0-9._/+-]*|/[A-Za-z0-9._/+-]*")  # ~ resolved on the host
FAKE_ACCELERATORS = re.compile(r"[A-Za-z0-9._-]+:[0-9]+( ?, ?[A-Za-z0-9._-]+:[0-9]+)*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def no_control(value: str) -> str:
    """``value`` without control characters (a newline would start a line of its own)."""
    found = _CONTROL.search(value)
    if found:
        raise ValueError(
            f"must not contain control characters (found {found.group()!r} in {value!r})"
        )
    return value


def ssh_word(value: str) -> str:
    """A host name, alias or user: one word, not an option."""
    no_control(value)
    if not value or any(c.isspace() for c in value):
        raise ValueError(f"must be one word without spaces, not {value!r}")
    if value.startswith("-"):
        raise ValueError(f"must not start with '-' (ssh would take {value!r} as an option)")
    return value


def ssh_hops(value: str) -> str:
    """``[user@]host[:port]`` hops joined by ``,`` (like ``ssh -J``), each an :func:`ssh_word`."""
    for hop in value.split(","):
        ssh_word(hop.strip())
    return value


def config_path_text(value: str) -> str:
    """A local file path written into the ssh config (quoted there: no ``"`` inside)."""
    no_control(value)
    if '"' in value:
        raise ValueError(f"must not contain a double quote, not {value!r}")
    return value


def shim_path(value: str) -> str:
    """An absolute (or ``~/``) plain path: it goes into the shim's systemd unit."""
    if not _SHIM_PATH.fullmatch(value) or "/../" in value + "/":
        raise ValueError(
            "must be an absolute (or ~/) plain path of letters, digits and ._/+- "
            f"(it goes into the shim's systemd unit), not {value!r}"
        )
    return value


def plain_path(value: str) -> str:
    """An absolute plain path (resolved nowhere: it goes into the unit as it is)."""
    if not PLAIN_PATH.fullmatch(value) or "/../" in value + "/":
        raise ValueError(
            "must be an absolute plain path of letters, digits and ._/+- (it goes into the "
            f"shim's systemd unit), not {value!r}"
        )
    return value


def fake_accelerators(value: str) -> str:
    if not FAKE_ACCELERATORS.fullmatch(value):
        raise ValueError(f"must be CHIP:COUNT[,CHIP:COUNT...] (e.g. h100:8), not {value!r}")
    return value


NoControl = Annotated[str, AfterValidator(no_control)]
SshWord = Annotated[str, AfterValidator(ssh_word)]
SshHops = Annotated[str, AfterValidator(ssh_hops)]
ConfigPath = Annotated[str, AfterValidator(config_path_text)]
ShimPath = Annotated[str, AfterValidator(shim_path)]
PlainPath = Annotated[str, AfterValidator(plain_path)]
FakeAccelerators = Annotated[str, AfterValidator(fake_accelerators)]
HostName = Annotated[str, AfterValidator(ssh_word)]  # also `Host tcl-host-NAME` in the ssh config
