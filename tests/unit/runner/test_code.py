"""Receiving and extracting the code tarball: hash, size, and every escape attempt."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tcl.runner.code import extract, receive
from tcl.runner.errors import CodeHashMismatch, PayloadTooLarge, UnsafeArchive


def make_tar(path: Path, build: Callable[[tarfile.TarFile], None]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        build(tar)
    return path


def add_file(tar: tarfile.TarFile, name: str, data: bytes = b"x") -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def add_special(tar: tarfile.TarFile, name: str, kind: bytes, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    tar.addfile(info)


def test_good_archive_extracts(tmp_path: Path) -> None:
    def build(tar: tarfile.TarFile) -> None:
        add_file(tar, "./pkg/main.py", b"print(1)\n")
        add_special(tar, "pkg/alias.py", tarfile.SYMTYPE, "main.py")
        add_special(tar, "pkg/hard.py", tarfile.LNKTYPE, "pkg/main.py")

    work = tmp_path / "work"
    assert extract(make_tar(tmp_path / "c.tgz", build), work) == 3
    assert (work / "pkg/main.py").read_bytes() == b"print(1)\n"
    assert (work / "pkg/alias.py").read_bytes() == b"print(1)\n"
    assert (work / "pkg/hard.py").read_bytes() == b"print(1)\n"


BAD: dict[str, Callable[[tarfile.TarFile], None]] = {
    "dotdot": lambda t: add_file(t, "../escaped.txt"),
    "dotdot-inner": lambda t: add_file(t, "a/../../escaped.txt"),
    "absolute": lambda t: add_file(t, "/tmp/escaped.txt"),
    "symlink-out": lambda t: add_special(t, "out", tarfile.SYMTYPE, "../../etc"),
    "symlink-abs": lambda t: add_special(t, "out", tarfile.SYMTYPE, "/etc"),
    "through-link": lambda t: (
        add_special(t, "d", tarfile.SYMTYPE, "."),
        add_file(t, "d/escaped.txt"),
    ),
    "hardlink-out": lambda t: add_special(t, "h", tarfile.LNKTYPE, "../escaped.txt"),
    "chardev": lambda t: add_special(t, "null", tarfile.CHRTYPE),
    "blockdev": lambda t: add_special(t, "sda", tarfile.BLKTYPE),
    "fifo": lambda t: add_special(t, "pipe", tarfile.FIFOTYPE),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_unsafe_archive_is_refused_and_nothing_is_written(tmp_path: Path, case: str) -> None:
    def build(tar: tarfile.TarFile) -> None:
        add_file(tar, "first-ok.txt")  # a harmless member before the bad one
        BAD[case](tar)

    archive = make_tar(tmp_path / "c.tgz", build)
    work = tmp_path / "a" / "b" / "work"
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(UnsafeArchive):
        extract(archive, work)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert not work.exists()


def test_not_a_tarball(tmp_path: Path) -> None:
    bad = tmp_path / "c.tgz"
    bad.write_bytes(b"definitely not gzip")
    with pytest.raises(UnsafeArchive, match="not a readable tar"):
        extract(bad, tmp_path / "work")


def test_unpacked_size_limit(tmp_path: Path) -> None:
    archive = make_tar(tmp_path / "c.tgz", lambda t: add_file(t, "big", b"0" * 10_000))
    with pytest.raises(UnsafeArchive, match="more than"):
        extract(archive, tmp_path / "work", max_unpacked_bytes=1000)


async def chunks(data: bytes, size: int = 7) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def test_receive_checks_hash_and_size(tmp_path: Path) -> None:
    data = b"some tarball bytes" * 10
    good = hashlib.sha256(data).hexdigest()
    dest = tmp_path / "code.tgz"
    assert await receive(chunks(data), dest, good, 10_000) == len(data)
    assert dest.read_bytes() == data
    with pytest.raises(CodeHashMismatch):
        await receive(chunks(data), dest, "0" * 64, 10_000)
    assert not dest.exists()
    with pytest.raises(PayloadTooLarge):
        await receive(chunks(data), dest, good, 50)
    assert not dest.exists()
