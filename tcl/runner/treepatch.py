"""Applying a ``SyncPatch`` to a job's working dir: all paths or none, each exactly once.

The phases, in order, so that a refused patch changes nothing:

1. check: the id is the hash of the content; every path is relative, has no ``..`` or
   ``.git`` component and no symlink among its existing parents (nothing is written through a
   link, so nothing lands outside the working dir);
2. conflicts: each path's current content must be what the client diffed against
   (``old_sha256``), or already what it wants (a patch half-applied by hand, or re-sent);
   every mismatch is collected into one ``SyncConflict``;
3. stage: new contents are written into a private staging dir inside the working dir (same
   file system, so the commit is renames only). Copy sources (renames) are read here, before
   anything is moved or deleted;
4. commit: existing targets are renamed aside into the staging dir, staged files renamed into
   place, empty parent dirs of deleted files removed (before placing: a directory may turn
   into a file). Each step is journaled; if one fails the journal is undone backwards and
   ``StorageError`` raised.

Only the patch's paths are hashed: a one-line change in a huge tree costs a few syscalls.
"""

from __future__ import annotations

import base64
import binascii
import collections
import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tcl.runner.api import SyncAck, SyncFile, SyncPatch
from tcl.runner.errors import InvalidRequest, StorageError, SyncConflict

_KEEP_IDS = 64  # applied patch ids remembered: a retry comes within seconds, not 64 patches
_STAGING_PREFIX = ".tcl-sync-"
_CHUNK = 1 << 20
_ABSENT = "absent"
_DIRECTORY = "directory"
_OTHER = "other"  # a socket, FIFO or device: never equal to any content hash


def patch_id(base: str, new_base: str, files: list[SyncFile]) -> str:
    """The sha256 of the canonical JSON of a patch's content: what ``SyncPatch.id`` must be."""
    doc = {"base": base, "new_base": new_base, "files": [f.model_dump(mode="json") for f in files]}
    return hashlib.sha256(
        json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def _file_mode(mode: int) -> int:
    # as untar does for the shipped tree: no setuid/setgid/sticky, no group/other write,
    # always readable and writable by us
    return (mode | 0o600) & 0o755


def _sha_file(path: str) -> str:
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _state(path: str) -> tuple[str, int]:
    """(content hash, permission bits) of what ``path`` is now; the hash is one of the
    markers above when it is no file or link."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # (a parent file this patch deletes)
        return _ABSENT, 0
    except OSError as e:
        raise StorageError(f"cannot read {path}: {e}") from None
    try:
        if stat.S_ISLNK(st.st_mode):
            return hashlib.sha256(os.readlink(path).encode()).hexdigest(), 0
        if stat.S_ISDIR(st.st_mode):
            return _DIRECTORY, 0
        if not stat.S_ISREG(st.st_mode):
            return _OTHER, 0
        return _sha_file(path), stat.S_IMODE(st.st_mode)
    except FileNotFoundError:  # removed meanwhile (by the job)
        return _ABSENT, 0
    except OSError as e:
        raise StorageError(f"cannot read {path}: {e}") from None


@dataclass
class _Item:
    f: SyncFile
    target: str  # absolute path
    now: str  # its current hash or marker
    staged: str | None = None  # the staged new content, in the staging dir
    backup: str | None = None  # where the old content was moved


class TreeSync:
    """The sync state of one working dir: the tree id it is at, and the patches applied."""

    def __init__(self, workdir: Path, base: str, *, _fail_at: int | None = None) -> None:
        self.workdir = workdir
        self.base = base
        self._root = os.path.abspath(workdir)
        self._lock = threading.Lock()
        self._applied: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._fail_at = _fail_at  # tests: the k-th commit step (from 0) fails with EIO
        self._steps = 0
        # a staging dir left by a runner killed mid-apply: its backups are of a patch that
        # never completed, and the job should not see it
        with contextlib.suppress(OSError):
            for name in os.listdir(self._root):
                if name.startswith(_STAGING_PREFIX):
                    shutil.rmtree(os.path.join(self._root, name), ignore_errors=True)

    def apply(self, patch: SyncPatch) -> SyncAck:
        if patch_id(patch.base, patch.new_base, patch.files) != patch.id:
            raise InvalidRequest("sync patch id is not the hash of its content")
        with self._lock:
            if patch.id in self._applied:
                return SyncAck(base=self.base, applied=0, already=True)
            items = self._check(patch.files)
            self._conflicts(items)
            staging = self._stage(items)
            try:
                self._commit(items, staging)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            self.base = patch.new_base
            self._applied[patch.id] = None
            while len(self._applied) > _KEEP_IDS:
                self._applied.popitem(last=False)
            return SyncAck(base=self.base, applied=len(patch.files))

    # -- 1. check ---------------------------------------------------------------------------

    def _check(self, files: list[SyncFile]) -> list[_Item]:
        paths = [f.path for f in files]
        if len(set(paths)) != len(paths):
            raise InvalidRequest("sync patch names a path twice")
        deleted = {f.path for f in files if f.sha256 is None}
        written = {f.path for f in files if f.sha256 is not None}
        items: list[_Item] = []
        for f in files:
            # a written path below a written file cannot both exist; a deleted one can
            self._check_path(f.path, deleted, written if f.sha256 is not None else set())
            if f.copy_from is not None:
                self._check_path(f.copy_from, deleted, set())
            sources = (f.data_b64 is not None) + (f.copy_from is not None) + (f.link is not None)
            if f.sha256 is None and sources:
                raise InvalidRequest(f"sync patch deletes {f.path!r} but gives it content")
            if f.sha256 is not None and sources != 1:
                raise InvalidRequest(f"sync patch needs one content source for {f.path!r}")
            if f.link is not None and hashlib.sha256(f.link.encode()).hexdigest() != f.sha256:
                raise InvalidRequest(f"sync patch: link target of {f.path!r} does not match")
            target = os.path.join(self._root, f.path)
            items.append(_Item(f, target, _state(target)[0]))
        return items

    def _check_path(self, path: str, deleted: set[str], written: set[str]) -> None:
        parts = path.split("/")
        if path.startswith("/") or any(p in ("", ".", "..", ".git") for p in parts):
            raise InvalidRequest(f"sync path must be relative, without '..' or .git: {path!r}")
        if parts[0].startswith(_STAGING_PREFIX):
            raise InvalidRequest(f"sync path is reserved: {path!r}")
        # every existing parent must be a real directory: a link could lead outside, a file
        # only if this patch deletes it (a file replaced by a directory)
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            if prefix in written:
                raise InvalidRequest(f"sync patch writes both {prefix!r} and {path!r}")
            try:
                st = os.lstat(os.path.join(self._root, prefix))
            except FileNotFoundError:
                return  # nor anything below it
            if stat.S_ISDIR(st.st_mode):
                continue
            if prefix in deleted:
                return  # moved aside before anything is placed below it
            if stat.S_ISLNK(st.st_mode):
                raise InvalidRequest(f"sync path goes through a symlink ({prefix}): {path!r}")
            raise InvalidRequest(f"sync path goes through a file ({prefix}): {path!r}")

    # -- 2. conflicts -----------------------------------------------------------------------

    def _conflicts(self, items: list[_Item]) -> None:
        deleted_below = {os.path.dirname(i.f.path) for i in items if i.f.sha256 is None}
        bad: list[str] = []
        for item in items:
            f = item.f
            # a directory becoming a file: fine if the patch deletes what is inside (if that
            # does not empty it, the commit fails and rolls back)
            if (
                item.now == _DIRECTORY
                and f.old_sha256 is None
                and f.sha256 is not None
                and any(d == f.path or d.startswith(f.path + "/") for d in deleted_below)
            ):
                continue
            if item.now == (f.old_sha256 or _ABSENT):
                continue
            if item.now == (f.sha256 or _ABSENT) and self._mode_done(item):
                continue  # already as wanted
            bad.append(f.path)
        for item in items:
            src = item.f.copy_from
            if src is not None and _state(os.path.join(self._root, src))[0] != item.f.sha256:
                bad.append(src)
        if bad:
            raise SyncConflict(sorted(set(bad)))

    @staticmethod
    def _mode_done(item: _Item) -> bool:
        if item.f.sha256 is None or item.f.link is not None:
            return True
        return _state(item.target)[1] == _file_mode(item.f.mode)

    # -- 3. stage ---------------------------------------------------------------------------

    def _stage(self, items: list[_Item]) -> str:
        try:
            staging = tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=self._root)
        except OSError as e:
            raise StorageError(f"cannot stage the sync patch in {self._root}: {e}") from None
        try:
            for n, item in enumerate(items):
                if item.f.sha256 is not None:
                    item.staged = os.path.join(staging, f"n{n}")
                    self._stage_one(item.f, item.staged)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return staging

    def _stage_one(self, f: SyncFile, dest: str) -> None:
        try:
            if f.link is not None:
                os.symlink(f.link, dest)
                return
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as out:
                h = hashlib.sha256()
                if f.data_b64 is not None:
                    try:
                        data = base64.b64decode(f.data_b64, validate=True)
                    except (binascii.Error, ValueError):
                        raise InvalidRequest(f"sync data of {f.path!r} is not base64") from None
                    h.update(data)
                    out.write(data)
                else:
                    assert f.copy_from is not None
                    src = os.path.join(self._root, f.copy_from)
                    sfd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
                    with os.fdopen(sfd, "rb") as inp:
                        while chunk := inp.read(_CHUNK):
                            h.update(chunk)
                            out.write(chunk)
                os.fchmod(out.fileno(), _file_mode(f.mode))
        except OSError as e:
            raise StorageError(f"cannot stage {f.path!r}: {e}") from None
        if h.hexdigest() != f.sha256:
            if f.data_b64 is not None:
                raise InvalidRequest(f"sync data of {f.path!r} does not match its sha256")
            raise SyncConflict([f.copy_from or f.path])  # the source changed meanwhile

    # -- 4. commit --------------------------------------------------------------------------

    def _step(self, fn: Callable[[], None]) -> None:
        if self._fail_at is not None and self._steps == self._fail_at:
            self._steps += 1
            raise OSError(errno.EIO, "injected failure")
        self._steps += 1
        fn()

    def _commit(self, items: list[_Item], staging: str) -> None:
        undo: list[Callable[[], None]] = []
        try:
            for n, item in enumerate(items):  # old contents aside: a rename, never a delete
                if item.now not in (_ABSENT, _DIRECTORY):
                    backup = os.path.join(staging, f"b{n}")
                    self._step(partial(os.replace, item.target, backup))
                    item.backup = backup
                    undo.append(partial(os.replace, backup, item.target))
            # before placing: a directory emptied by deletes may be where a new file goes
            for item in items:
                if item.f.sha256 is None:
                    self._prune(os.path.dirname(item.target), undo)
            for item in items:
                if item.staged is not None:
                    self._place(item, undo)
        except OSError as e:
            for fn in reversed(undo):
                with contextlib.suppress(OSError):
                    fn()
            raise StorageError(f"cannot apply the sync patch (rolled back): {e}") from None

    def _place(self, item: _Item, undo: list[Callable[[], None]]) -> None:
        parent = os.path.dirname(item.target)
        missing: list[str] = []
        while parent != self._root and not os.path.lexists(parent):
            missing.append(parent)
            parent = os.path.dirname(parent)
        for d in reversed(missing):
            self._step(partial(os.mkdir, d))
            undo.append(partial(os.rmdir, d))
        staged = item.staged
        assert staged is not None
        self._step(partial(os.replace, staged, item.target))
        undo.append(partial(os.replace, item.target, staged))

    def _prune(self, d: str, undo: list[Callable[[], None]]) -> None:
        """Remove ``d`` and its parents while empty (a deleted file's dirs), never the root."""
        while d != self._root and d.startswith(self._root + os.sep):
            try:
                st = os.lstat(d)
                if not stat.S_ISDIR(st.st_mode) or os.listdir(d):
                    return
            except FileNotFoundError:
                return
            self._step(partial(os.rmdir, d))
            undo.append(partial(os.mkdir, d, stat.S_IMODE(st.st_mode)))
            d = os.path.dirname(d)
