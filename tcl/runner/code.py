"""Receiving the code tarball: size-limited, sha256-verified, extracted with path checks.

The whole archive is checked before anything is written: a member whose path is absolute or
has a ``..`` part, a link whose target leaves the working dir, a member below a link, or a
device/FIFO makes the upload fail with ``UnsafeArchive`` and the working dir untouched.
"""

from __future__ import annotations

import hashlib
import posixpath
import tarfile
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

from tcl.runner.errors import CodeHashMismatch, PayloadTooLarge, StorageError, UnsafeArchive

DEFAULT_MAX_CODE_BYTES = 2 * 1024**3  # compressed upload
DEFAULT_MAX_UNPACKED_BYTES = 8 * 1024**3


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


def _clean(name: str) -> str:
    """The member's path relative to the working dir, or raise if it would leave it."""
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise UnsafeArchive(f"absolute path in archive: {name!r}")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(f"'..' in archive path: {name!r}")
    return "/".join(parts)


def check_members(members: list[tarfile.TarInfo], max_unpacked_bytes: int) -> None:
    """Raise ``UnsafeArchive`` unless every member stays inside the working dir."""
    links: set[str] = set()
    total = 0
    for m in members:
        path = _clean(m.name)
        if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
            raise UnsafeArchive(f"device, FIFO or unknown member type in archive: {m.name!r}")
        # A member below an earlier link could be written through it to anywhere.
        prefix = path
        while "/" in prefix:
            prefix = prefix.rsplit("/", 1)[0]
            if prefix in links:
                raise UnsafeArchive(f"archive path goes through a link: {m.name!r}")
        if m.issym():
            target = m.linkname
            if target.startswith("/"):
                raise UnsafeArchive(f"link to an absolute path: {m.name!r} -> {target!r}")
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
            if resolved == ".." or resolved.startswith("../"):
                raise UnsafeArchive(
                    f"link points outside the working dir: {m.name!r} -> {target!r}"
                )
            links.add(path)
        elif m.islnk():
            target = _clean(m.linkname)
            if target in links:
                raise UnsafeArchive(f"hard link to a link: {m.name!r} -> {m.linkname!r}")
            links.add(path)
        total += max(m.size, 0)
        if total > max_unpacked_bytes:
            raise UnsafeArchive(f"archive unpacks to more than {max_unpacked_bytes} bytes")


def extract(
    archive: Path, workdir: Path, max_unpacked_bytes: int = DEFAULT_MAX_UNPACKED_BYTES
) -> int:
    """Check then extract a tar.gz into ``workdir``; returns the number of members."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            check_members(members, max_unpacked_bytes)
            workdir.mkdir(parents=True, exist_ok=True)
            for m in members:
                m.mode = (m.mode | 0o600) & 0o755 if m.isfile() else m.mode & 0o755  # no setuid
            if hasattr(tarfile, "data_filter"):
                # Second line of defence where the interpreter has it (3.11.4+).
                tar.extractall(workdir, members=members, filter="data")
            else:  # pragma: no cover - older 3.11 patch releases (Debian's 3.11.2)
                tar.extractall(workdir, members=members)
    except (tarfile.TarError, EOFError, zlib.error) as e:  # a truncated or corrupt gzip
        raise UnsafeArchive(f"not a readable tar archive: {e}") from e
    except OSError as e:
        raise StorageError(f"cannot extract the code into {workdir}: {e}") from e
    return len(members)
