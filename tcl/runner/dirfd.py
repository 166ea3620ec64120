"""Tree writes through directory fds that never go through a link already in the tree.

A path is walked one component at a time from a directory fd with ``O_NOFOLLOW``, and a
file is created with ``O_EXCL | O_NOFOLLOW`` after whatever had its name is removed, so a
symlink in the destination (shipped by an archive, or left in a working dir by an earlier
job) is replaced or refused, never followed. The archive extractor (``untar.py``) and the
code cache's copy (``codecache.py``) both write through these.

Everything here raises plain ``OSError``: callers translate it at their own seam. A link or
a file where a directory is expected is ``ENOTDIR`` (Linux reports that, not ``ELOOP``, for
``O_DIRECTORY | O_NOFOLLOW`` on a link); a real directory where something else must go is
``EISDIR``, because a directory is never removed to make room.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Sequence

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    """The entry ``name`` itself (a link is not followed), or None when there is none."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_dir(dir_fd: int, name: str) -> int:
    """Open the real directory ``name``; ``ENOTDIR`` when it is a link or a file."""
    return os.open(name, DIR_FLAGS, dir_fd=dir_fd)


def open_path(root_fd: int, parts: Sequence[str], create_mode: int | None = None) -> int:
    """Open ``root/parts...`` one component at a time, never through a link.

    ``create_mode`` set: a missing directory is made with it (the umask applies, as for
    ``mkdir``). The caller closes the fd returned (a new one even when ``parts`` is empty)."""
    fd = os.dup(root_fd)
    try:
        for part in parts:
            try:
                sub = open_dir(fd, part)
            except FileNotFoundError:
                if create_mode is None:
                    raise
                with contextlib.suppress(FileExistsError):  # made meanwhile: open_dir still
                    os.mkdir(part, create_mode, dir_fd=fd)  # refuses a link put there
                sub = open_dir(fd, part)
            os.close(fd)
            fd = sub
    except BaseException:
        os.close(fd)
        raise
    return fd


def clear(dir_fd: int, name: str) -> None:
    """Remove the file or link ``name`` if there is one; a real directory raises ``EISDIR``."""
    st = lstat_at(dir_fd, name)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, "a directory is in the way", name)
    os.unlink(name, dir_fd=dir_fd)


def make_dir(dir_fd: int, name: str, mode: int) -> int:
    """Open the directory ``name``, making it (``mode``, umask applies) when missing.

    A file or link in its place is removed first; an existing real directory is kept as is."""
    st = lstat_at(dir_fd, name)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        st = None
    if st is None:
        os.mkdir(name, mode, dir_fd=dir_fd)
    return open_dir(dir_fd, name)


def create_file(dir_fd: int, name: str, mode: int) -> int:
    """A new, empty regular file ``name`` open for writing (``mode``, umask applies).

    Whatever file or link had the name is unlinked first, so its old inode (perhaps a hard
    link shared with another path, or a link's target) is never written."""
    clear(dir_fd, name)
    return os.open(name, _NEW_FILE_FLAGS, mode, dir_fd=dir_fd)


def make_symlink(dir_fd: int, name: str, target: str) -> None:
    """A symlink ``name -> target``, replacing a file or link of that name."""
    clear(dir_fd, name)
    os.symlink(target, name, dir_fd=dir_fd)


def move_into(src_fd: int, dst_fd: int) -> None:
    """Move every entry of the directory ``src_fd`` into ``dst_fd`` (on one file system).

    A directory merges into a real directory of the same name; anything else replaces the
    file or link in its way (``rename`` replaces a link, it never writes through it). A real
    directory where a non-directory goes raises ``EISDIR``; nothing is deleted to make room.
    """
    pending: list[tuple[str, ...]] = [()]
    while pending:
        parts = pending.pop()
        src = open_path(src_fd, parts)
        try:
            dst = open_path(dst_fd, parts)
            try:
                for name in os.listdir(src):
                    if _move_entry(src, dst, name):
                        pending.append((*parts, name))
            finally:
                os.close(dst)
        finally:
            os.close(src)


def _move_entry(src: int, dst: int, name: str) -> bool:
    """Move one entry; True when it is a directory to merge into the one already there."""
    moving = os.stat(name, dir_fd=src, follow_symlinks=False)
    there = lstat_at(dst, name)
    if there is not None and stat.S_ISDIR(there.st_mode):
        if stat.S_ISDIR(moving.st_mode):
            return True
        raise IsADirectoryError(errno.EISDIR, "a directory is in the way", name)
    if there is not None and stat.S_ISDIR(moving.st_mode):
        os.unlink(name, dir_fd=dst)  # rename cannot put a directory over a file or link
    os.rename(name, name, src_dir_fd=src, dst_dir_fd=dst)
    return False
