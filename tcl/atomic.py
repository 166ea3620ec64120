"""Atomic file writes, shared by every deployable (stdlib only: the agents start fast).

A reader sees either the old content or the whole new content, never a torn file: write a
temporary file in the same folder, fsync it, rename it over the target, fsync the folder.
Files are 0600 unless a caller asks for more; :func:`private_opener` makes an ``open()`` create
its file 0600 too, whatever the umask.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def private_opener(path: str | os.PathLike[str], flags: int) -> int:
    """An ``opener`` for ``open()``: a file it creates is 0600 (the umask can only take away)."""
    return os.open(path, flags, 0o600)


def write_atomic(path: Path, data: bytes | str, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` atomically; creates missing parent folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_json_atomic(path: Path, obj: Any, mode: int = 0o600) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=True) + "\n", mode)
