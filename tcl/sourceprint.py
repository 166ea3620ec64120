"""What code a long-lived local process runs: a hash of the tcl package's module files, which a
client compares with its own before it hands that process work (standard library only: the
CLI's hand-over path imports it)."""

from __future__ import annotations

import hashlib
import os

import tcl


def source_fingerprint() -> str:
    """A hash of the tcl package's module files (path, size, mtime): a daemon started before
    an upgrade or an edit of the checkout runs old code, and is replaced (about 1 ms)."""
    h = hashlib.sha256()
    stack = [os.path.dirname(tcl.__file__ or "")]
    while stack:
        for entry in sorted(os.scandir(stack.pop()), key=lambda e: e.name):
            if entry.is_dir(follow_symlinks=False) and entry.name != "__pycache__":
                stack.append(entry.path)
            elif entry.name.endswith(".py"):
                st = entry.stat()
                h.update(f"{entry.path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]
