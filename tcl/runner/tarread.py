"""Reading a tar stream in flat memory: every limit is checked as a header arrives.

``tarfile`` trusts headers: a GNU long name or a pax header is read whole into memory (a 1 GiB
one took the runner to 8 GB), and a ``TarFile`` keeps every member it has read. Here the
archive is opened as a stream (``r|*``: no seeking, no member index) with a ``TarInfo``
subclass that refuses an oversized extended header *before* ``tarfile`` reads it, the member
list is emptied after each member, and the member count and unpacked bytes are counted as
the stream goes, so a bomb is refused at the header that crosses a limit.

``_proc_member`` is private, but ``tarfile``'s source names it as the place a subclass
overrides, and it has the same signature and role in 3.11.2 (Debian's, with the security
backports), 3.11.7, 3.12, 3.13 and main: every header, extended ones included, goes through
it (``_fromtarfile``/``fromtarfile`` call ``cls``'s, so chained headers reach ours too).
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from tcl.runner.errors import UnsafeArchive

MAX_HEADER_BYTES = 64 * 1024  # one GNU long name/link or pax header; real ones are < 1 KiB
MAX_CHAINED_HEADERS = 8  # extended headers before one member (a pax + two GNU is the most seen)
MAX_NAME_CHARS = 200  # of a member name quoted in an error message

_GNU_LONG = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK)
_PAX = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)


@dataclass(frozen=True)
class Limits:
    max_members: int
    max_unpacked_bytes: int  # regular files' data plus extended headers' bytes


def shown(name: str) -> str:
    """A member name for an error message: quoted, and cut short (a name can be 64 KiB)."""
    if len(name) > MAX_NAME_CHARS:
        return repr(name[:MAX_NAME_CHARS]) + "…"
    return repr(name)


class _BoundedInfo(tarfile.TarInfo):
    def _proc_member(self, tar: Any) -> Any:  # tarfile's own hook; untyped in typeshed
        assert isinstance(tar, BoundedTarFile)
        if self.type == tarfile.GNUTYPE_SPARSE:
            # Its extension blocks are read in a loop with no bound; code never needs sparse.
            raise UnsafeArchive(f"sparse file in archive: {shown(self.name)}")
        if self.type in _GNU_LONG or self.type in _PAX:
            if self.size > MAX_HEADER_BYTES or self.size < 0:
                raise UnsafeArchive(
                    f"archive has an extended header of {self.size} bytes "
                    f"(the limit is {MAX_HEADER_BYTES})"
                )
            tar.chained += 1
            if tar.chained > MAX_CHAINED_HEADERS:
                # tarfile recurses once per chained header, holding each one's buffer.
                raise UnsafeArchive(f"more than {MAX_CHAINED_HEADERS} extended headers in a row")
            if self.type == tarfile.XGLTYPE:
                # Global pax records accumulate in tar.pax_headers for the whole stream.
                tar.global_header_bytes += self.size
                if tar.global_header_bytes > MAX_HEADER_BYTES:
                    raise UnsafeArchive(f"global pax headers over {MAX_HEADER_BYTES} bytes")
            tar.header_bytes += self.size
        else:
            tar.chained = 0
        return super()._proc_member(tar)  # type: ignore[misc]  # not in typeshed

    def _proc_gnusparse_10(self, member: Any, pax_headers: Any, tar: Any) -> None:
        # GNU sparse 1.0 keeps its map in the data, read with no bound; refuse it up front.
        raise UnsafeArchive(f"sparse file in archive: {shown(member.name)}")


class BoundedTarFile(tarfile.TarFile):
    """A ``TarFile`` reading ``_BoundedInfo`` headers; open it with ``open_stream``."""

    tarinfo = _BoundedInfo
    members: list[tarfile.TarInfo]  # set by TarFile.__init__; not in typeshed

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # TarFile.__init__ already reads the first header, so these must exist before it.
        self.chained = 0
        self.global_header_bytes = 0
        self.header_bytes = 0  # extended headers read since the last member
        super().__init__(*args, **kwargs)


def open_stream(fileobj: IO[bytes]) -> BoundedTarFile:
    """A tar (gzip, bz2, xz or plain: detected) read front to back, never seeking back."""
    return BoundedTarFile.open(fileobj=fileobj, mode="r|*")


def members(tar: BoundedTarFile, limits: Limits) -> Iterator[tarfile.TarInfo]:
    """The members in order, each checked against ``limits`` before its data is read."""
    count = 0
    total = 0
    while True:
        member = tar.next()
        tar.members.clear()  # tarfile would keep every header (477 MB for a million)
        if member is None:
            return
        count += 1
        if count > limits.max_members:
            raise UnsafeArchive(f"archive has more than {limits.max_members} members")
        if member.size < 0:
            raise UnsafeArchive(f"negative size in archive: {shown(member.name)}")
        total += tar.header_bytes + (member.size if member.isreg() else 0)
        tar.header_bytes = 0
        if total > limits.max_unpacked_bytes:
            raise UnsafeArchive(f"archive unpacks to more than {limits.max_unpacked_bytes} bytes")
        if member.sparse is not None:
            raise UnsafeArchive(f"sparse file in archive: {shown(member.name)}")
        yield member
