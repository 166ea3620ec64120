"""The CLI fork server's wire (``tcl.cli.forkserver``; its client: ``tcl.cli.handoff``).

A ``tcl`` command hands itself to the fork server that ``tcl serve`` keeps warm: one request on
its Unix socket, with the command's stdin, stdout and stderr passed along (``SCM_RIGHTS``). The
request is 4 bytes of length and a JSON object (:class:`ForkRequest`); the server answers with
lines: ``pid N`` (the forked command, which the client forwards its signals to), then
``exit N`` (its exit code: 128 + the signal that ended it), or ``stale`` (it runs other code
than the client: the client does the command itself) or ``error TEXT``.

Standard library only: the client imports this before anything else of tcl.
"""

from __future__ import annotations

import json
import os
import struct
from typing import NamedTuple

VERSION = 1
SOCKET = "cli.sock"  # in the daemon's dir, <state dir>/serve (0700)
MAX_REQUEST = 4 * 1024 * 1024  # argv and the environment
LENGTH = struct.Struct(">I")


class WireError(ValueError):
    """A request that is not one (names what is wrong)."""


class ForkRequest(NamedTuple):
    argv: list[str]  # after ``tcl``
    cwd: str
    env: dict[str, str]
    umask: int
    source: str  # tcl.sourceprint.source_fingerprint() of the client's tcl
    python: str  # the client's sys.executable: the same venv
    version: int = VERSION

    def encode(self) -> bytes:
        body = json.dumps(self._asdict(), separators=(",", ":")).encode()
        return LENGTH.pack(len(body)) + body

    @classmethod
    def decode(cls, body: bytes) -> ForkRequest:
        try:
            raw = json.loads(body)
        except ValueError as e:
            raise WireError(f"not JSON: {e}") from None
        if not isinstance(raw, dict):
            raise WireError("not a JSON object")
        if raw.get("version") != VERSION:
            raise WireError(f"version: {raw.get('version')!r} is not {VERSION}")
        for key, kind in (("cwd", str), ("umask", int), ("source", str), ("python", str)):
            if not isinstance(raw.get(key), kind):
                raise WireError(f"{key}: a {kind.__name__} is needed")
        argv, env = raw.get("argv"), raw.get("env")
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise WireError("argv: a list of strings is needed")
        if not isinstance(env, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise WireError("env: an object of strings is needed")
        return cls(
            argv=argv,
            cwd=raw["cwd"],
            env=env,
            umask=raw["umask"],
            source=raw["source"],
            python=raw["python"],
        )


def socket_path() -> str:
    """``<state dir>/serve/cli.sock``, found without making anything (``tcl.control.paths``
    makes and checks the dirs; the listener checks them before it binds)."""
    base = os.path.expanduser(os.environ.get("TCL_STATE_DIR") or "~/.local/share/tcl")
    return os.path.join(base, "serve", SOCKET)
