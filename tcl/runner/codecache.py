"""A content-addressed cache of extracted code trees, shared by the runners of one host.

Layout under the cache root (``--code-cache``; the shim bind-mounts ``<state>/code-cache``)::

    trees/<sha256>/       the tarball with that sha256, extracted
    trees/.tmp-<random>/  an extraction in progress (never read)
    locks/<sha256>.lock   flock held while that tree is being extracted

A tree exists only once complete: it is extracted into a temp dir (with every check of
``code.extract``: escaping paths, links, devices, the size limit), synced to disk, and the
dir is renamed into place. Two runners extracting the same
tarball at once serialise on the lock, and the second one finds the tree. A tree's name is
the sha256 of a tarball that was verified on upload, so it is never written again.

A job never works in the cache. Its working dir is either an overlay mount with the tree as
the read-only lower layer (the docker executor, when the task names its code: writes go to a
per-task upper dir; see ``premounted_code``), or a *copy* of the tree, made with
``copy_file_range`` (a reflink on btrfs/XFS, an in-kernel copy elsewhere, a plain copy across
file systems). Hard links would be cheaper than a copy but share the inode, and a job running
as root (every docker job) opening a shipped file for writing would change the cache for every
later job. Nothing is evicted yet: remove ``trees/<sha>`` to free space.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tcl.runner import code as codemod
from tcl.runner.errors import StorageError

_NO_FAST_COPY = frozenset({errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP})


def _valid_sha(sha256: str) -> bool:
    return len(sha256) == 64 and all(c in "0123456789abcdef" for c in sha256)


class CodeCache:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.trees = root / "trees"
        self.locks = root / "locks"

    def tree(self, sha256: str) -> Path | None:
        """The complete tree for ``sha256``, or None when the cache does not have it."""
        if not _valid_sha(sha256):
            return None
        path = self.trees / sha256
        return path if path.is_dir() else None

    @contextmanager
    def _locked(self, sha256: str) -> Iterator[None]:
        self.locks.mkdir(parents=True, exist_ok=True)
        with open(self.locks / f"{sha256}.lock", "a") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def add(
        self,
        sha256: str,
        archive: Path,
        max_unpacked_bytes: int,
        max_members: int = codemod.DEFAULT_MAX_MEMBERS,
    ) -> Path:
        """Extract a verified tarball (its sha256 is ``sha256``) into the cache, once."""
        if not _valid_sha(sha256):
            raise ValueError(f"not a sha256: {sha256!r}")
        try:
            with self._locked(sha256):
                found = self.tree(sha256)
                if found is not None:
                    return found
                self.trees.mkdir(parents=True, exist_ok=True)
                tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.trees))
                try:
                    codemod.extract(archive, tmp, max_unpacked_bytes, max_members)
                    _seal(tmp)
                    final = self.trees / sha256
                    os.rename(tmp, final)
                    _fsync_dir(self.trees)
                except BaseException:
                    _remove_tree(tmp)
                    raise
                return final
        except OSError as e:
            raise StorageError(f"cannot add the code to the cache {self.root}: {e}") from e

    def materialise(self, sha256: str, workdir: Path) -> int:
        """Copy the tree into ``workdir`` (created; existing files are replaced).

        Returns the number of entries copied; StorageError if the tree is missing."""
        tree = self.tree(sha256)
        if tree is None:
            raise StorageError(f"code {sha256} is not in the cache {self.root}")
        try:
            return _copy_tree(tree, workdir)
        except OSError as e:
            raise StorageError(f"cannot copy the code into {workdir}: {e}") from e


def _seal(root: Path) -> None:
    """Make the tree durable before it is published.

    Modes stay as shipped: read-only bits would not stop a root job, and a job's working dir
    must look the same whether it is a copy or an overlay on the tree."""
    del root
    os.sync()  # one call instead of 20,000 fsyncs; the rename that follows publishes the tree


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_tree(path: Path) -> None:
    def writable(_func: object, p: str, _exc: object) -> None:
        os.chmod(os.path.dirname(p), 0o700)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            os.unlink(p)

    shutil.rmtree(path, onerror=writable)


def _copy_tree(src: Path, dst: Path) -> int:
    count = 0
    dst.mkdir(parents=True, exist_ok=True)
    for dirpath, dirs, files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        out = dst if rel == "." else dst / rel
        for name in dirs:
            s = os.path.join(dirpath, name)
            if os.path.islink(s):  # os.walk lists a link to a dir among the dirs
                files.append(name)
                continue
            (out / name).mkdir(mode=stat.S_IMODE(os.lstat(s).st_mode) | 0o700, exist_ok=True)
            count += 1
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(dirpath, d))]
        for name in files:
            s, d = os.path.join(dirpath, name), out / name
            st = os.lstat(s)
            if d.is_symlink() or d.exists():
                d.unlink()
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(s), d)
            else:
                _copy_file(s, d, stat.S_IMODE(st.st_mode) | 0o200, st.st_size)
            count += 1
    return count


def _copy_file(src: str, dst: Path, mode: int, size: int) -> None:
    fd_in = os.open(src, os.O_RDONLY)
    try:
        fd_out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            left = size
            try:
                while left > 0:
                    n = os.copy_file_range(fd_in, fd_out, left)
                    if n == 0:
                        break
                    left -= n
            except OSError as e:
                if e.errno not in _NO_FAST_COPY:
                    raise
                os.lseek(fd_in, size - left, os.SEEK_SET)
                while chunk := os.read(fd_in, 1 << 20):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd_out, view) :]
        finally:
            os.close(fd_out)
    finally:
        os.close(fd_in)
