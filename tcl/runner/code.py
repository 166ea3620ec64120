"""Receiving the code tarball: size-limited, sha256-verified, extracted with path checks.

The archive is streamed (``tarread``) into a fresh temp dir inside the working dir, written
there through directory fds that never follow a link (``untar``), its links checked, and only
then moved into place. A member whose path is absolute or has a ``..`` part, a link that
leaves the tree, a member below a link, a device/FIFO or a bomb (oversized headers, too many
members, too many bytes) makes the upload fail with ``UnsafeArchive`` and leaves nothing.

Imports the standard library only: the integration tests run ``extract`` with the runner
image's bare interpreter.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import shutil
import tarfile
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

from tcl.runner import dirfd, tarread, untar
from tcl.runner.errors import CodeHashMismatch, PayloadTooLarge, StorageError, UnsafeArchive
from tcl.runner.tarread import shown

DEFAULT_MAX_CODE_BYTES = 2 * 1024**3  # compressed upload
DEFAULT_MAX_UNPACKED_BYTES = 8 * 1024**3
DEFAULT_MAX_MEMBERS = 200_000  # a big monorepo checkout is ~100k files


async def receive(
    chunks: AsyncIterator[bytes], dest: Path, expected_sha256: str, max_bytes: int
) -> int:
    """Stream an upload to ``dest`` (never held in memory), checking size and hash.

    On any failure ``dest`` is removed. Returns the size in bytes.
    """
    digest = hashlib.sha256()
    size = 0
    try:
        with open(dest, "wb") as out:
            async for chunk in chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise PayloadTooLarge(f"code upload is over the limit of {max_bytes} bytes")
                digest.update(chunk)
                try:
                    out.write(chunk)
                except OSError as e:
                    raise StorageError(f"cannot store the code upload: {e}") from e
        actual = digest.hexdigest()
        if actual != expected_sha256:
            raise CodeHashMismatch(
                f"sha256 of the body is {actual}, X-Code-Sha256 says {expected_sha256}"
            )
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return size


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def extract(
    archive: Path,
    workdir: Path,
    max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES,
    max_members: int = DEFAULT_MAX_MEMBERS,
) -> int:
    """Extract a tarball into ``workdir`` (made if missing); returns the number of members.

    Entries already in ``workdir`` are replaced by the archive's (a link among them is
    replaced, never followed); a directory merges into a directory."""
    limits = tarread.Limits(max_members=max_members, max_unpacked_bytes=max_unpacked_bytes)
    try:
        made = _makedirs(workdir)
        try:
            return _unpack_then_move(archive, workdir, limits)
        except BaseException:
            for path in reversed(made):  # a refused archive leaves no trace, not even dirs
                with contextlib.suppress(OSError):
                    path.rmdir()
            raise
    except (tarfile.TarError, EOFError, zlib.error) as e:  # a truncated or corrupt archive
        raise UnsafeArchive(f"not a readable tar archive: {_short(str(e))}") from e
    except OSError as e:
        raise StorageError(f"cannot extract the code into {workdir}: {_describe(e)}") from e


def _unpack_then_move(archive: Path, workdir: Path, limits: tarread.Limits) -> int:
    # The temp dir is inside the working dir, so the final moves are renames on one file
    # system even when the working dir is a mount point.
    tmp = _fresh_dir(workdir)
    try:
        with open(archive, "rb") as f, tarread.open_stream(f) as tar:
            root_fd = os.open(tmp, dirfd.DIR_FLAGS)
            try:
                count = untar.unpack(tar, root_fd, limits)
            finally:
                os.close(root_fd)
        _move_into(tmp, workdir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # what is left: merged dirs, or a refused tree
    return count


def _makedirs(path: Path) -> list[Path]:
    """``mkdir -p path``; returns the directories made, outermost first."""
    missing: list[Path] = []
    while not path.is_dir():
        missing.append(path)
        path = path.parent
    for p in reversed(missing):
        p.mkdir()
    return missing[::-1]


def _fresh_dir(parent: Path) -> Path:
    while True:
        path = parent / f".tcl-unpack-{secrets.token_hex(8)}"
        try:
            path.mkdir(mode=0o700)
            return path
        except FileExistsError:
            continue


def _move_into(tmp: Path, workdir: Path) -> None:
    src = os.open(tmp, dirfd.DIR_FLAGS)
    try:
        # The working dir itself may be a link (a spec's working_dir): that one is followed.
        dst = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            dirfd.move_into(src, dst)
        finally:
            os.close(dst)
    finally:
        os.close(src)


def _describe(e: OSError) -> str:
    if e.filename is None:
        return _short(str(e))
    return f"{e.strerror}: {shown(str(e.filename))}"


def _short(text: str) -> str:
    return text if len(text) <= 500 else text[:500] + "…"
