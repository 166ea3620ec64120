"""Bearer-token files of the agents (stdlib only: both agents read one at start-up).

A token file guards an agent that every user of a shared host can reach on loopback, so it is
refused, with one line saying why and how to fix it, when another user could read or replace
it, or when the token is too short to resist guessing:

- not a regular file (a directory, a device);
- owned by another user (``check_owner``: off where the file is handed in from outside, e.g.
  bind-mounted into a container whose root is not the file's owner);
- readable or writable by the group or others (anything but ``chmod 600``);
- in a world-writable directory (another user could swap it, sticky bit or not);
- under 256 bits of entropy, estimated from the token's alphabet.
"""

from __future__ import annotations

import math
import os
import secrets
import stat
import string
from pathlib import Path

MIN_ENTROPY_BITS = 256.0
_HEX = frozenset(string.hexdigits)
_B64URL = frozenset(string.ascii_letters + string.digits + "-_=")


class TokenFileError(Exception):
    """A token file that must not be used; the message is one line for the user."""


def new_token() -> str:
    """A fresh token: 32 random bytes, URL-safe base64 (43 characters, 258 bits)."""
    return secrets.token_urlsafe(32)


def entropy_bits(token: str) -> float:
    """A generous estimate of a random token's entropy from the alphabet it is written in."""
    chars = set(token)
    if chars <= _HEX:
        per_char = 4.0
    elif chars <= _B64URL:
        per_char = 6.0
    else:
        per_char = math.log2(94)  # printable ASCII
    return len(token) * per_char


def read_token(path: Path, what: str, *, check_owner: bool = True) -> str:
    """The token in ``path``, or ``TokenFileError`` naming ``what`` (e.g. ``--token-file``)."""
    where = f"{what} {path}"
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise TokenFileError(f"{where}: no such file") from None
    except OSError as e:
        raise TokenFileError(f"{where}: cannot read it: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise TokenFileError(f"{where}: is {kind}; give the path of a file holding the token")
    if check_owner and st.st_uid != os.geteuid():
        raise TokenFileError(
            f"{where}: owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}); "
            "use a token file of your own"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise TokenFileError(
            f"{where}: mode {mode:04o} lets other users at it; run chmod 600 {path}"
        )
    parent = path.resolve().parent
    if stat.S_IMODE(os.stat(parent).st_mode) & 0o002:
        raise TokenFileError(
            f"{where}: its directory {parent} is world-writable (another user could replace "
            "the file); keep it in a directory only you can write"
        )
    try:
        token = path.read_text().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise TokenFileError(f"{where}: cannot read it: {e}") from None
    if not token:
        raise TokenFileError(f"{where}: the file is empty")
    if entropy_bits(token) < MIN_ENTROPY_BITS:
        raise TokenFileError(
            f"{where}: the token is too short to be safe (under {MIN_ENTROPY_BITS:.0f} bits); "
            "use 32 random bytes, e.g. python3 -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'"
        )
    return token
