"""Where the workstation keeps its state (overridable for tests and teams).

The state is the user's alone: tokens, the database, pulled logs and code snapshots. Every
directory here is 0700 and every file tcl makes in it 0600, whatever the umask. A directory
that already exists is checked on each use: one of ours with group or other bits (made by hand,
or by an older tcl) is tightened to 0700; one another user owns is refused with one line (the
fix is a directory of one's own), since its owner could read or replace what tcl keeps there.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tcl.control.errors import TclError

DEFAULT_CONFIG_PATH = Path("~/.config/tcl/config.yaml")


def config_path(explicit: str | os.PathLike[str] | None = None) -> tuple[Path, bool]:
    """The config file to read and whether the user named it (then it must exist)."""
    if explicit is not None:
        return Path(explicit).expanduser(), True
    env = os.environ.get("TCL_CONFIG")
    if env:
        return Path(env).expanduser(), True
    return DEFAULT_CONFIG_PATH.expanduser(), False


def private_dir(path: Path, fix: str = "") -> Path:
    """``path`` made if missing, 0700 and ours (see the module docstring); ``fix`` says how
    to point tcl elsewhere, for the refusal."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.geteuid():
        where = fix or "use a directory of your own"
        raise TclError(
            f"{path} belongs to another user (uid {st.st_uid}), who could read or change what "
            f"tcl keeps there: {where}"
        )
    if stat.S_IMODE(st.st_mode) != 0o700:
        try:
            path.chmod(0o700)
        except OSError as e:
            raise TclError(f"cannot make {path} private (chmod 700): {e.strerror or e}") from None
    return path


def state_dir() -> Path:
    """``$TCL_STATE_DIR`` or ``~/.local/share/tcl``: the database, pulled logs, ssh files."""
    env = os.environ.get("TCL_STATE_DIR")
    base = Path(env).expanduser() if env else Path("~/.local/share/tcl").expanduser()
    return private_dir(base, "set TCL_STATE_DIR to a directory of your own")


def cache_dir() -> Path:
    """Code tarballs (content-addressed) live here; safe to delete. ``$TCL_CODE_CACHE_DIR``:
    a directory shared by the schedulers of a team (a matrix's code is snapshotted once, by
    `tcl matrix add`, and placed by whichever scheduler claims an entry); they run as one
    account, which owns it."""
    env = os.environ.get("TCL_CODE_CACHE_DIR")
    if env:
        fix = "set TCL_CODE_CACHE_DIR to a directory of your own (or unset it)"
        return private_dir(Path(env).expanduser(), fix)
    return private_dir(state_dir() / "code")


def logs_dir() -> Path:
    return private_dir(state_dir() / "logs")


def ssh_dir() -> Path:
    return private_dir(state_dir() / "ssh")


def db_url() -> str:
    """``$TCL_DB_URL`` (e.g. PostgreSQL for a team) or SQLite in the state dir."""
    return os.environ.get("TCL_DB_URL") or f"sqlite:///{state_dir() / 'tcl.db'}"
