"""Where the workstation keeps its state (overridable for tests and teams)."""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_CONFIG_PATH = Path("~/.config/tcl/config.yaml")


def config_path(explicit: str | os.PathLike[str] | None = None) -> tuple[Path, bool]:
    """The config file to read and whether the user named it (then it must exist)."""
    if explicit is not None:
        return Path(explicit).expanduser(), True
    env = os.environ.get("TCL_CONFIG")
    if env:
        return Path(env).expanduser(), True
    return DEFAULT_CONFIG_PATH.expanduser(), False


def state_dir() -> Path:
    """``$TCL_STATE_DIR`` or ``~/.local/share/tcl``: the database, pulled logs, ssh files."""
    env = os.environ.get("TCL_STATE_DIR")
    base = Path(env).expanduser() if env else Path("~/.local/share/tcl").expanduser()
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    return base


def cache_dir() -> Path:
    """Code tarballs (content-addressed) live here; safe to delete. ``$TCL_CODE_CACHE_DIR``:
    a directory shared by the schedulers of a team (a matrix's code is snapshotted once, by
    `tcl matrix add`, and placed by whichever scheduler claims an entry)."""
    env = os.environ.get("TCL_CODE_CACHE_DIR")
    path = Path(env).expanduser() if env else state_dir() / "code"
    path.mkdir(parents=True, exist_ok=True)
    return path


def logs_dir() -> Path:
    path = state_dir() / "logs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def ssh_dir() -> Path:
    path = state_dir() / "ssh"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def db_url() -> str:
    """``$TCL_DB_URL`` (e.g. PostgreSQL for a team) or SQLite in the state dir."""
    return os.environ.get("TCL_DB_URL") or f"sqlite:///{state_dir() / 'tcl.db'}"
