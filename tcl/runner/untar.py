"""Writing a tar stream into a fresh, empty directory, member by member, through dir fds.

``tarfile.extractall`` opens a path string, so a link extracted earlier can redirect a later
member anywhere (the chain ``d -> .``, ``e -> d/..``, ``e2 -> e/..``, ``f -> e2/outside/victim``
then a file ``f`` writes outside on 3.11.2, which has no ``data`` filter). Here nothing is
written through a link, on any Python:

- a member's parent directories are opened with ``O_NOFOLLOW``: a link on the way is refused;
- a file is created with ``O_EXCL | O_NOFOLLOW`` after the file or link of the same name (an
  earlier member) is unlinked, so an earlier link or hard link is replaced, never written;
- a hard link may only name a regular file already written, reached without a link;
- devices, FIFOs, sparse and unknown types are refused; modes lose setuid/setgid and
  group/other write (files 0o600 at least, 0o755 at most; directories keep 0o700 for us);
- once the stream ends, every symlink is resolved against the tree as written (a later link
  can change where an earlier one points) and must stay inside it.

Ownership is not restored (the files belong to the runner, as with the ``data`` filter), nor
are directory mtimes (moving the tree into place would change them anyway).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tarfile

from tcl.runner import dirfd, tarread
from tcl.runner.errors import UnsafeArchive
from tcl.runner.tarread import shown

MAX_PATH_CHARS = 4096  # PATH_MAX: a longer path could not be opened by the job anyway
_MAX_NAME_BYTES = 255  # one component (NAME_MAX)
_MAX_LINK_HOPS = 40  # the kernel's MAXSYMLINKS: a longer chain fails with ELOOP, reaching nothing
_IMPLICIT_DIR_MODE = 0o777  # a parent with no member of its own: mkdir's default, as tarfile
_COPY_CHUNK = 1 << 20


def clean(name: str) -> tuple[str, ...]:
    """The member's path components below the root, or raise if it could leave it."""
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchive(f"absolute path in archive: {shown(name)}")
    if len(name) > MAX_PATH_CHARS:
        raise UnsafeArchive(f"archive path longer than {MAX_PATH_CHARS}: {shown(name)}")
    if "\x00" in name:
        raise UnsafeArchive(f"NUL in archive path: {shown(name)}")
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        raise UnsafeArchive(f"'..' in archive path: {shown(name)}")
    if any(len(p.encode(errors="surrogateescape")) > _MAX_NAME_BYTES for p in parts):
        raise UnsafeArchive(f"archive path has a name over {_MAX_NAME_BYTES} bytes: {shown(name)}")
    return parts


class _Writer:
    """Writes members under ``root_fd``; keeps the fd of the last member's parent directory,
    because the members of one directory usually come one after another."""

    def __init__(self, tar: tarfile.TarFile, root_fd: int) -> None:
        self.tar = tar
        self.root_fd = root_fd
        self._parent: tuple[tuple[str, ...], int] | None = None

    def close(self) -> None:
        if self._parent is not None:
            os.close(self._parent[1])
            self._parent = None

    def parent(self, parts: tuple[str, ...], name: str) -> int:
        # A cached fd stays right: a directory in the tree is never removed or replaced.
        if self._parent is not None and self._parent[0] == parts:
            return self._parent[1]
        fd = self._walk(parts, name, create=True)
        self.close()
        self._parent = (parts, fd)
        return fd

    def _walk(self, parts: tuple[str, ...], name: str, create: bool) -> int:
        try:
            return dirfd.open_path(self.root_fd, parts, _IMPLICIT_DIR_MODE if create else None)
        except NotADirectoryError:
            raise UnsafeArchive(
                f"archive path goes through a link or a file: {shown(name)}"
            ) from None
        except FileNotFoundError:  # only when not creating: a hard link's target
            raise UnsafeArchive(
                f"hard link to a file not (yet) in the archive: {shown(name)}"
            ) from None

    def write(self, member: tarfile.TarInfo) -> None:
        parts = clean(member.name)
        if not parts:
            if member.isdir():
                return  # "./": the root's mode is the working dir's own, not the archive's
            raise UnsafeArchive(f"archive member with an empty name: {shown(member.name)}")
        if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
            raise UnsafeArchive(
                f"device, FIFO or unknown member type in archive: {shown(member.name)}"
            )
        if member.issym():
            _check_link_text(parts, member)  # refuse the obvious early; the tree check is final
        parent = self.parent(parts[:-1], member.name)
        name = parts[-1]
        existing = dirfd.lstat_at(parent, name)
        if existing is not None and stat.S_ISDIR(existing.st_mode) and not member.isdir():
            raise UnsafeArchive(
                f"archive puts a non-directory over a directory: {shown(member.name)}"
            )
        if member.isreg():
            self._file(parent, name, member)
        elif member.isdir():
            fd = dirfd.make_dir(parent, name, _IMPLICIT_DIR_MODE)
            try:
                os.fchmod(fd, (member.mode & 0o755) | 0o700)
            finally:
                os.close(fd)
        elif member.issym():
            dirfd.make_symlink(parent, name, member.linkname)
        else:
            self._hard_link(parent, name, parts, member)

    def _file(self, parent: int, name: str, member: tarfile.TarInfo) -> None:
        source = self.tar.extractfile(member)
        assert source is not None  # a regular file always has a reader
        fd = dirfd.create_file(parent, name, 0o600)
        try:
            while chunk := source.read(_COPY_CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
            os.fchmod(fd, (member.mode | 0o600) & 0o755)  # no setuid/setgid, no g/o write
            # An mtime out of range only costs the timestamp, as in tarfile.
            with contextlib.suppress(OverflowError, ValueError, OSError):
                os.utime(fd, (member.mtime, member.mtime))
        finally:
            os.close(fd)

    def _hard_link(
        self, parent: int, name: str, parts: tuple[str, ...], member: tarfile.TarInfo
    ) -> None:
        target = clean(member.linkname)
        if not target:
            raise UnsafeArchive(f"hard link to the root: {shown(member.name)}")
        if target == parts:
            return  # a link to itself: the file is already there
        src = self._walk(target[:-1], member.name, create=False)
        try:
            st = dirfd.lstat_at(src, target[-1])
            if st is None:
                raise UnsafeArchive(
                    f"hard link to a file not (yet) in the archive: {shown(member.name)}"
                )
            if not stat.S_ISREG(st.st_mode):
                raise UnsafeArchive(f"hard link to a link or a directory: {shown(member.name)}")
            dirfd.clear(parent, name)
            os.link(target[-1], name, src_dir_fd=src, dst_dir_fd=parent, follow_symlinks=False)
        finally:
            os.close(src)


def _check_link_text(parts: tuple[str, ...], member: tarfile.TarInfo) -> None:
    target = member.linkname
    if target.startswith("/"):
        raise UnsafeArchive(f"link to an absolute path: {shown(member.name)}")
    depth = len(parts) - 1
    for part in target.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                raise UnsafeArchive(f"link points outside the working dir: {shown(member.name)}")
        elif part not in ("", "."):
            depth += 1


def unpack(tar: tarread.BoundedTarFile, root_fd: int, limits: tarread.Limits) -> int:
    """Write every member of ``tar`` under the empty directory ``root_fd``, then check the
    links; returns the number of members. Raises ``UnsafeArchive`` or ``OSError``."""
    writer = _Writer(tar, root_fd)
    count = 0
    try:
        for member in tarread.members(tar, limits):
            writer.write(member)
            count += 1
    finally:
        writer.close()
    for link in _links(root_fd):
        if _escapes(root_fd, link):
            raise UnsafeArchive(f"link points outside the working dir: {shown(link)}")
    return count


def _links(root_fd: int) -> list[str]:
    """Every symlink in the tree, as a path relative to the root."""
    found: list[str] = []
    pending = [""]
    while pending:
        rel = pending.pop()
        fd = dirfd.open_path(root_fd, rel.split("/") if rel else ())
        try:
            with os.scandir(fd) as entries:
                for entry in entries:
                    path = f"{rel}/{entry.name}" if rel else entry.name
                    if entry.is_symlink():
                        found.append(path)
                    elif entry.is_dir(follow_symlinks=False):
                        pending.append(path)
        finally:
            os.close(fd)
    return found


def _escapes(root_fd: int, link: str) -> bool:
    """Whether following ``link`` leaves the root, resolving each link met on the way
    against the tree (like ``realpath``, but ``..`` at the root is an escape, not the
    parent, and a missing component is read as a plain name, as realpath does)."""
    done: list[str] = []
    todo = link.split("/")[::-1]
    hops = 0
    while todo:
        part = todo.pop()
        if part in ("", "."):
            continue
        if part == "..":
            if not done:
                return True
            done.pop()
            continue
        done.append(part)
        path = "/".join(done)
        try:
            st = os.stat(path, dir_fd=root_fd, follow_symlinks=False)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ENOTDIR):
                continue
            raise
        if stat.S_ISLNK(st.st_mode):
            hops += 1
            if hops > _MAX_LINK_HOPS:
                return False
            target = os.readlink(path, dir_fd=root_fd)
            if target.startswith("/"):
                return True
            done.pop()
            todo.extend(target.split("/")[::-1])
    return False
