"""Where the daemon lives and what it was started with (cheap: the CLI checks it each call)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import tcl
from tcl.control.daemon.api import Identity
from tcl.control.paths import db_url, state_dir
from tcl.sourceprint import source_fingerprint


def daemon_dir() -> Path:
    """``<state dir>/serve``: the daemon's record, token, lock and log (one daemon per state
    dir, like the local shim)."""
    path = state_dir() / "serve"
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def current_identity() -> Identity:
    return Identity(
        version=tcl.__version__,
        source=source_fingerprint(),
        # hashed: a PostgreSQL URL may hold a password, and the healthcheck is open
        db=hashlib.sha256(db_url().encode()).hexdigest()[:16],
        home=os.environ.get("HOME", ""),
        # a new login has a new agent socket: the daemon's SSH connections must use it
        ssh_agent=os.environ.get("SSH_AUTH_SOCK", ""),
        root=str(Path(tcl.__file__).parent),
    )


def shares(found: Identity, want: Identity) -> bool:
    """Whether a client of ``want`` may use the daemon that runs with ``found``: the same, or
    another install of the same version working on the same store, home and SSH agent."""
    if found == want:
        return True
    same_work = (found.db, found.home, found.ssh_agent) == (want.db, want.home, want.ssh_agent)
    return found.root != want.root and found.version == want.version and same_work


def refusal(found: Identity, want: Identity) -> str | None:
    """Why a client of ``want`` must not replace the daemon of ``found`` (another install of
    another version: each would replace the other's, and every warm connection with it)."""
    if found.root == want.root or found.version == want.version:
        return None
    return (
        f"a tcl serve of tcl {found.version} (from {found.root or 'an older install'}) runs for "
        f"this state dir, and this is tcl {want.version} (from {want.root}): they are not "
        "compatible. Use one tcl, or stop that daemon first (`tcl serve --stop` from the "
        "other install)."
    )
