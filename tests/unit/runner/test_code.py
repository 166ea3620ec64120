"""Receiving and extracting the code tarball: hash, size, and every escape attempt."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tcl.runner.code import extract, receive
from tcl.runner.errors import CodeHashMismatch, PayloadTooLarge, UnsafeArchive


def make_tar(path: Path, build: Callable[[tarfile.TarFile], object], mode: str = "w:gz") -> Path:
    with tarfile.open(path, mode) as tar:  # type: ignore[call-overload]
        build(tar)
    return path


def add_file(tar: tarfile.TarFile, name: str, data: bytes = b"x") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return info


def add_special(tar: tarfile.TarFile, name: str, kind: bytes, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    tar.addfile(info)
    return info


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


BAD: dict[str, Callable[[tarfile.TarFile], object]] = {
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


def link_chain(tar: tarfile.TarFile) -> None:
    """The issue's attack: each link is harmless on its own text, but ``d -> .`` makes
    ``e -> d/..`` the parent of the working dir, ``e2`` its parent again, and the file ``f``
    was opened (following the link ``f``) at ``e2/outside/victim``."""
    add_special(tar, "d", tarfile.SYMTYPE, ".")
    add_special(tar, "e", tarfile.SYMTYPE, "d/..")
    add_special(tar, "e2", tarfile.SYMTYPE, "e/..")
    add_special(tar, "f", tarfile.SYMTYPE, "e2/outside/victim")
    add_file(tar, "f", b"written through the links")


@pytest.fixture(params=["data-filter", "no-data-filter"])
def interpreter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both kinds of Python: with tarfile's data filter (3.11.4+) and without it, like the
    runner image's Debian 3.11.2 (the integration tests run that interpreter for real)."""
    if request.param == "no-data-filter":
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    return str(request.param)


@pytest.mark.parametrize("workdir_exists", [False, True])
def test_link_chain_cannot_write_outside(
    tmp_path: Path, interpreter: str, workdir_exists: bool
) -> None:
    (tmp_path / "outside").mkdir()
    victim = tmp_path / "outside" / "victim"  # where e2/outside/victim lands from a/work
    work = tmp_path / "a" / "work"
    if workdir_exists:
        work.mkdir(parents=True)
    with pytest.raises(UnsafeArchive, match="outside"):
        extract(make_tar(tmp_path / "c.tgz", link_chain), work)
    assert not victim.exists()
    if workdir_exists:
        assert os.listdir(work) == []
    else:
        assert not work.parent.exists()  # nor the dirs made for it


def test_a_later_member_replaces_an_earlier_link_or_hard_link(
    tmp_path: Path, interpreter: str
) -> None:
    """A duplicate name never writes through the earlier member: a symlink or a hard link to
    another shipped file is replaced, and that file keeps its content."""

    def build(tar: tarfile.TarFile) -> None:
        add_file(tar, "target.txt", b"original")
        add_special(tar, "soft", tarfile.SYMTYPE, "target.txt")
        add_file(tar, "soft", b"new soft")
        add_file(tar, "other.txt", b"original too")
        add_special(tar, "hard", tarfile.LNKTYPE, "other.txt")
        add_file(tar, "hard", b"new hard")

    work = tmp_path / "work"
    assert extract(make_tar(tmp_path / "c.tgz", build), work) == 6
    assert (work / "target.txt").read_bytes() == b"original"
    assert (work / "other.txt").read_bytes() == b"original too"
    assert not (work / "soft").is_symlink() and (work / "soft").read_bytes() == b"new soft"
    assert (work / "hard").read_bytes() == b"new hard"
    assert (work / "other.txt").stat().st_nlink == 1


HARD_LINK_TRICKS: dict[str, Callable[[tarfile.TarFile], object]] = {
    # A hard link to a symlink member would share the link's inode, not a file's.
    "to-a-symlink": lambda t: (
        add_file(t, "x"),
        add_special(t, "l", tarfile.SYMTYPE, "x"),
        add_special(t, "h", tarfile.LNKTYPE, "l"),
    ),
    # Through the links of the chain to a file outside: the job could then write to it.
    "through-links-to-outside": lambda t: (
        add_special(t, "d", tarfile.SYMTYPE, "."),
        add_special(t, "e", tarfile.SYMTYPE, "d/.."),
        add_special(t, "h", tarfile.LNKTYPE, "e/outside/victim"),
    ),
    "to-a-directory": lambda t: (
        add_special(t, "sub", tarfile.DIRTYPE),
        add_special(t, "h", tarfile.LNKTYPE, "sub"),
    ),
    "to-a-later-member": lambda t: (
        add_special(t, "h", tarfile.LNKTYPE, "x"),
        add_file(t, "x"),
    ),
}


@pytest.mark.parametrize("case", sorted(HARD_LINK_TRICKS))
def test_hard_link_only_to_a_regular_file_already_extracted(
    tmp_path: Path, interpreter: str, case: str
) -> None:
    outside = tmp_path / "outside"  # e/outside/victim, seen from the working dir
    outside.mkdir()
    (outside / "victim").write_bytes(b"secret")
    work = tmp_path / "work"
    with pytest.raises(UnsafeArchive):
        extract(make_tar(tmp_path / "c.tgz", HARD_LINK_TRICKS[case]), work)
    assert (outside / "victim").stat().st_nlink == 1
    assert not work.exists()


def test_modes_are_masked_and_links_inside_are_kept(tmp_path: Path) -> None:
    def build(tar: tarfile.TarFile) -> None:
        for name, mode in (("suid", 0o4755), ("none", 0o000), ("world", 0o777)):
            info = tarfile.TarInfo(name)
            info.mode = mode
            tar.addfile(info, io.BytesIO(b""))
        add_special(tar, "dir", tarfile.DIRTYPE)
        add_special(tar, "dir/up", tarfile.SYMTYPE, "../suid")
        add_special(tar, "dir/self", tarfile.SYMTYPE, ".")

    work = tmp_path / "work"
    extract(make_tar(tmp_path / "c.tgz", build), work)
    modes = {n: stat.S_IMODE((work / n).stat().st_mode) for n in ("suid", "none", "world")}
    assert modes == {"suid": 0o755, "none": 0o600, "world": 0o755}
    assert os.readlink(work / "dir/up") == "../suid" and os.readlink(work / "dir/self") == "."
    assert sorted(os.listdir(work)) == ["dir", "none", "suid", "world"]  # no temp dir left


def test_extracting_over_a_working_dir_replaces_links_found_there(tmp_path: Path) -> None:
    """A retried install: links a job left in the working dir are replaced, never followed."""
    outside = tmp_path / "outside"
    outside.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    (work / "pkg").symlink_to(outside)
    (work / "main.py").symlink_to(outside / "main.py")
    (work / "kept.txt").write_bytes(b"the job's")

    def build(tar: tarfile.TarFile) -> None:
        add_file(tar, "pkg/mod.py", b"shipped")
        add_file(tar, "main.py", b"shipped main")

    extract(make_tar(tmp_path / "c.tgz", build), work)
    assert os.listdir(outside) == []
    assert not (work / "pkg").is_symlink() and (work / "pkg/mod.py").read_bytes() == b"shipped"
    assert not (work / "main.py").is_symlink()
    assert (work / "kept.txt").read_bytes() == b"the job's"


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
