"""Keep the host's code caches under a size budget: least recently used first.

Two caches hold code on a host, both content-addressed by the tarball's sha256:

* ``<state-dir>/code-cache/trees/<sha>/``: trees extracted by the runners
  (``tcl.runner.codecache``; a lookup touches the tree's mtime);
* the ssh backend's tarballs, ``<shim_dir>/code/<sha>.tar.gz`` (``--code-tarballs``; the
  hand-over snippet touches a tarball when it uses it).

Every few reconcile passes the shim runs :meth:`CodeGc.collect` in a thread: while the two
together are over ``--code-cache-max-bytes``, the entry with the oldest mtime goes. Never
evicted: the code of a task whose files still exist (its runner may copy the tree, its overlay
may sit on it), and anything used in the last ``min_age_s`` (a submit that just looked it up).
A tree is renamed out of ``trees/`` before it is deleted, so a lookup never sees half of one.
Partial uploads left by a client that died mid-upload go after a day.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 20 * 1024**3
MIN_AGE_S = 600.0
STALE_PART_S = 24 * 3600.0


def _sha_of(name: str) -> str | None:
    sha = name.removesuffix(".tar.gz")
    return sha if len(sha) == 64 and all(c in "0123456789abcdef" for c in sha) else None


@dataclass(frozen=True)
class _Entry:
    path: Path
    sha256: str
    size: int
    used_at: float  # mtime: set when made, touched on use
    is_tree: bool


def _tree_bytes(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


class CodeGc:
    def __init__(
        self,
        trees: Path,
        tarballs: Path | None,
        max_bytes: int,
        min_age_s: float = MIN_AGE_S,
    ) -> None:
        self.trees = trees
        self.tarballs = tarballs
        self.max_bytes = max_bytes
        self.min_age_s = min_age_s
        self._tree_sizes: dict[str, int] = {}  # trees never change once published

    def _entries(self) -> list[_Entry]:
        out: list[_Entry] = []
        for root, is_tree in ((self.trees, True), (self.tarballs, False)):
            if root is None:
                continue
            try:
                names = os.listdir(root)
            except FileNotFoundError:
                continue
            for name in names:
                sha = _sha_of(name) if is_tree != name.endswith(".tar.gz") else None
                if sha is None:
                    continue  # temp dirs, .part files, locks: not ours to judge
                path = root / name
                try:
                    st = path.lstat()
                except FileNotFoundError:
                    continue
                if is_tree:
                    size = self._tree_sizes.get(sha)
                    if size is None:
                        size = self._tree_sizes[sha] = _tree_bytes(path)
                else:
                    size = st.st_size
                out.append(_Entry(path, sha, size, st.st_mtime, is_tree))
        return out

    def _stale_parts(self) -> list[Path]:
        """Partial uploads (``<sha>.tar.gz.part-<pid>``) untouched for a day: their client died
        without removing them (a cancelled upload removes its own)."""
        if self.tarballs is None:
            return []
        gone: list[Path] = []
        cutoff = time.time() - STALE_PART_S
        for path in self.tarballs.glob("*.tar.gz.part-*"):
            with contextlib.suppress(OSError):
                if path.lstat().st_mtime < cutoff:
                    path.unlink()
                    gone.append(path)
        return gone

    def collect(self, in_use: set[str]) -> list[Path]:
        """Evict least-recently-used entries until under the budget; returns what went
        (stale partial uploads included)."""
        stale = self._stale_parts()
        entries = self._entries()
        total = sum(e.size for e in entries)
        now = time.time()
        evicted: list[Path] = stale
        for e in sorted(entries, key=lambda e: e.used_at):
            if total <= self.max_bytes:
                break
            if e.sha256 in in_use or now - e.used_at < self.min_age_s:
                continue
            try:
                if e.is_tree:
                    doomed = e.path.with_name(f".tmp-evict-{secrets.token_hex(4)}")
                    os.rename(e.path, doomed)
                    shutil.rmtree(doomed, ignore_errors=True)
                    self._tree_sizes.pop(e.sha256, None)
                else:
                    e.path.unlink()
            except OSError as err:
                log.warning("cannot evict %s from the code cache: %s", e.path, err)
                continue
            total -= e.size
            evicted.append(e.path)
        if evicted:
            log.info("code cache: evicted %d entries, %d bytes left", len(evicted), total)
        return evicted
