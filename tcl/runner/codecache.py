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
later job. The shim keeps the cache under a size budget (its ``codegc`` module): a lookup
touches the tree's mtime, and the least recently used trees not used by a task go first.
"""

from __future__ import annotations

import contextlib
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
from tcl.runner import dirfd
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
        if not path.is_dir():
            return None
        with contextlib.suppress(OSError):  # a read-only view of the cache: no touch
            os.utime(path)  # used now: the shim evicts least recently used trees first
        return path

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
        """Copy the tree into ``workdir`` (created; existing files and links are replaced,
        a link is never followed: a retried install may find what a job left there).

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
    """Copy ``src`` into ``dst`` through directory fds; returns the entries copied.

    ``dst`` itself may be a link (a spec's working dir); nothing below it is followed: a
    link where a directory or a file goes is replaced by it."""
    dst.mkdir(parents=True, exist_ok=True)
    src_root = os.open(src, dirfd.DIR_FLAGS)
    try:
        dst_root = os.open(dst, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            return _copy_dirs(src_root, dst_root)
        finally:
            os.close(dst_root)
    finally:
        os.close(src_root)


def _copy_dirs(src_root: int, dst_root: int) -> int:
    count = 0
    # Paths of directories still to copy, not open fds: a deep tree would run out of fds.
    pending: list[tuple[str, ...]] = [()]
    while pending:
        parts = pending.pop()
        src = dirfd.open_path(src_root, parts)
        try:
            dst = dirfd.open_path(dst_root, parts)
            try:
                for name in os.listdir(src):
                    if _copy_entry(src, dst, name):
                        pending.append((*parts, name))
                    count += 1
            finally:
                os.close(dst)
        finally:
            os.close(src)
    return count


def _copy_entry(src: int, dst: int, name: str) -> bool:
    """Copy one entry; True when it is a directory whose contents are still to copy."""
    st = os.stat(name, dir_fd=src, follow_symlinks=False)
    if stat.S_ISDIR(st.st_mode):
        os.close(dirfd.make_dir(dst, name, stat.S_IMODE(st.st_mode) | 0o700))
        return True
    if stat.S_ISLNK(st.st_mode):
        dirfd.make_symlink(dst, name, os.readlink(name, dir_fd=src))
    else:
        _copy_file(src, dst, name, stat.S_IMODE(st.st_mode) | 0o200, st.st_size)
    return False


def _copy_file(src_dir: int, dst_dir: int, name: str, mode: int, size: int) -> None:
    fd_in = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src_dir)
    try:
        fd_out = dirfd.create_file(dst_dir, name, mode)
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
