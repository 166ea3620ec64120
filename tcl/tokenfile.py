"""Bearer-token files of the agents (stdlib only: both agents read one at start-up).

A token file guards an agent that every user of a shared host can reach on loopback, so it is
refused, with one line naming the flag and the fix, when another user could read or replace it,
or when the token is too short to resist guessing:

- not a regular file (a directory, a FIFO planted at the path: opened non-blocking);
- owned by another user (``check_owner``: off where the file is handed in from outside, e.g.
  bind-mounted into a container whose root is not the file's owner);
- readable or writable by the group or others (anything but ``chmod 600``);
- in a world-writable directory, sticky or not (whoever can write there can swap the file
  between our checks and our read, or before the next restart);
- under 256 bits of entropy, estimated from the token's alphabet, or holding characters an
  HTTP header cannot carry.

Owner and mode are checked on the opened file, not the path, so nothing can be swapped between
the check and the read.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
import string
from collections.abc import Iterable
from pathlib import Path

from tcl.atomic import write_atomic

TOKEN_MIN_BITS = 256
TOKEN_MAX_BYTES = 4096
_HEX = frozenset(string.hexdigits)
_BASE64URL = frozenset(string.ascii_letters + string.digits + "-_")
_NEW_TOKEN = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


class TokenFileError(Exception):
    """A token file that must not be used; the message is one line for the user."""


def new_token() -> str:
    """A fresh token: 32 random bytes, URL-safe base64 (43 characters, 258 bits)."""
    return secrets.token_urlsafe(32)


def bearer_matches(headers: Iterable[tuple[bytes, bytes]], token: bytes) -> bool:
    """Whether raw ASGI ``headers`` carry exactly one ``Authorization: Bearer <token>``."""
    values = [v for k, v in headers if k == b"authorization"]
    if len(values) != 1:  # none, or ambiguous
        return False
    scheme, _, given = values[0].partition(b" ")
    # compare_digest: the time taken does not depend on how much of the token matched.
    return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), token)


def token_bits(token: str) -> float:
    """A rough upper bound on a token's entropy, from its alphabet and length."""
    chars = set(token)
    per_char = 4.0 if chars <= _HEX else 6.0 if chars <= _BASE64URL else 6.5
    return per_char * len(token)


def read_token(
    path: Path,
    flag: str,
    *,
    check_owner: bool = True,
    create: bool = False,
    rotate: bool = False,
) -> str:
    """The token in ``path``, or ``TokenFileError`` naming ``flag`` (e.g. ``--token-file``).

    ``create``: a missing file is made (a new random token, mode 0600, in a directory made 0700
    if it does not exist). ``rotate``: a new token replaces the file's (atomically, 0600) first,
    so whoever read the old one has nothing once the agent restarts."""
    where = f"{flag} {path}"
    for parent in dict.fromkeys([path.parent, path.resolve().parent]):
        try:
            mode = os.stat(parent).st_mode
        except FileNotFoundError:
            continue
        if mode & stat.S_IWOTH:
            raise TokenFileError(
                f"{where}: its directory {parent} is world-writable (mode "
                f"{stat.S_IMODE(mode):04o}), so another user could replace the token; keep it in "
                f"a directory only this user can write (mkdir -m 700 DIR)"
            )
    if rotate:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, (new_token() + "\n").encode(), mode=0o600)
    try:
        # O_NONBLOCK: a FIFO planted at the path must not hang the agent (it is refused below).
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if not create:
            raise TokenFileError(f"{where}: no such file") from None
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(path, (new_token() + "\n").encode(), mode=0o600)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise TokenFileError(f"{where}: cannot open it: {e.strerror}") from None
    try:
        _check_file(where, path, os.fstat(fd), check_owner)
        raw = os.read(fd, TOKEN_MAX_BYTES + 1)
    except OSError as e:
        raise TokenFileError(f"{where}: cannot read it: {e.strerror}") from None
    finally:
        os.close(fd)
    return _check_token(where, path, raw)


def _check_file(where: str, path: Path, st: os.stat_result, check_owner: bool) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise TokenFileError(f"{where}: is a directory; give the path of a token file inside it")
    if not stat.S_ISREG(st.st_mode):
        raise TokenFileError(f"{where}: not a regular file; give the path of a token file")
    uid = os.geteuid()
    if check_owner and st.st_uid != uid:
        raise TokenFileError(
            f"{where}: owned by uid {st.st_uid}, who could change it, not by this user "
            f"(uid {uid}); run chown {uid} {path} (and chmod 600 {path})"
        )
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        raise TokenFileError(
            f"{where}: mode {mode:04o} lets other users at it; run chmod 600 {path}"
        )


def _fix(path: Path) -> str:
    return f"write a new one, (umask 077; {_NEW_TOKEN} > {path}), or delete it for the shim to make"


def _check_token(where: str, path: Path, raw: bytes) -> str:
    if len(raw) > TOKEN_MAX_BYTES:
        raise TokenFileError(f"{where}: over {TOKEN_MAX_BYTES} bytes: not a token file")
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        token = "\x00"  # refused just below, with the same hint
    if not token:
        raise TokenFileError(f"{where}: the file is empty; {_fix(path)}")
    if not all("!" <= c <= "~" for c in token):
        raise TokenFileError(
            f"{where}: the token has characters an HTTP header cannot carry (spaces, control or "
            f"non-ASCII); {_fix(path)}"
        )
    bits = token_bits(token)
    if bits < TOKEN_MIN_BITS:
        raise TokenFileError(
            f"{where}: the token is too short ({len(token)} characters, about {bits:.0f} bits; "
            f"{TOKEN_MIN_BITS} needed); {_fix(path)}"
        )
    return token
