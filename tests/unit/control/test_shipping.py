"""Shipping: what goes into the snapshot, determinism, caching, the size-limit error."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tcl.control.errors import CodeTooLargeError, ShippingError
from tcl.control.ignore import IgnoreRules
from tcl.control.shipping import snapshot


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
        check=True,
        capture_output=True,
    )


def _names(tar_path: Path) -> dict[str, bytes]:
    out = {}
    with tarfile.open(tar_path) as t:
        for m in t.getmembers():
            f = t.extractfile(m)
            out[m.name] = f.read() if f else b""
    return out


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    r.mkdir()
    _git(r, "init", "-q")
    (r / ".gitignore").write_text("*.ckpt\nbuild/\n")
    (r / "train.py").write_text("print('v1')\n")
    (r / "deleted.py").write_text("x\n")
    (r / "pkg").mkdir()
    (r / "pkg" / "mod.py").write_text("A = 1\n")
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "init")
    return r


def test_git_snapshot_contents(repo: Path, tmp_path: Path) -> None:
    (repo / "train.py").write_text("print('v2 uncommitted')\n")  # uncommitted edit
    (repo / "new_untracked.py").write_text("new\n")  # untracked, not ignored
    (repo / "weights.ckpt").write_text("big\n")  # ignored by .gitignore
    (repo / "build").mkdir()
    (repo / "build" / "out.o").write_text("o\n")
    (repo / "secret.env").write_text("TOKEN=1\n")
    (repo / ".tclignore").write_text("secret.env\n")
    (repo / "deleted.py").unlink()  # tracked, deleted in the work tree
    snap = snapshot(repo / "pkg", tmp_path / "cache", 10**9)  # from a subdirectory
    files = _names(snap.tarball)
    assert snap.git and snap.root == repo.resolve()
    assert files["train.py"] == b"print('v2 uncommitted')\n"
    assert "new_untracked.py" in files and "pkg/mod.py" in files
    for gone in ("weights.ckpt", "build/out.o", "secret.env", "deleted.py"):
        assert gone not in files
    assert not any(n.startswith(".git/") for n in files)


def test_deterministic_and_cached(repo: Path, tmp_path: Path) -> None:
    a = snapshot(repo, tmp_path / "c1", 10**9)
    b = snapshot(repo, tmp_path / "c2", 10**9)  # separate cache: rebuilt from scratch
    assert a.sha256 == b.sha256 and a.tarball.read_bytes() == b.tarball.read_bytes()
    again = snapshot(repo, tmp_path / "c1", 10**9)
    assert again.tarball == a.tarball
    (repo / "train.py").write_text("print('changed')\n")
    assert snapshot(repo, tmp_path / "c1", 10**9).sha256 != a.sha256


def test_plain_directory_uses_tclignore(tmp_path: Path) -> None:
    d = tmp_path / "plain"
    (d / "data").mkdir(parents=True)
    (d / "a.py").write_text("a\n")
    (d / "data" / "x.bin").write_text("x\n")
    (d / "keep.log").write_text("k\n")
    (d / "drop.log").write_text("d\n")
    (d / ".tclignore").write_text("data/\n*.log\n!keep.log\n")
    snap = snapshot(d, tmp_path / "cache", 10**9)
    assert not snap.git
    assert set(_names(snap.tarball)) == {".tclignore", "a.py", "keep.log"}


def test_size_limit_names_limit_and_five_largest(tmp_path: Path) -> None:
    d = tmp_path / "big"
    d.mkdir()
    for i in range(7):
        (d / f"f{i}.bin").write_bytes(b"x" * (1000 * (i + 1)))
    with pytest.raises(CodeTooLargeError) as e:
        snapshot(d, tmp_path / "cache", 5000)
    msg = str(e.value)
    assert "limit of 4.9 KB" in msg
    for i in (6, 5, 4, 3, 2):
        assert f"f{i}.bin" in msg
    assert "f1.bin" not in msg and "f0.bin" not in msg


@pytest.mark.parametrize(
    ("pattern", "path", "is_dir", "expected"),
    [
        ("*.py", "a/b/c.py", False, True),
        ("/top.txt", "top.txt", False, True),
        ("/top.txt", "sub/top.txt", False, False),
        ("logs/", "logs", True, True),
        ("logs/", "logs", False, False),
        ("logs/", "logs/x.txt", False, True),
        ("a/**/z", "a/b/c/z", False, True),
        ("**/cache", "x/y/cache", True, True),
        ("data?.csv", "data1.csv", False, True),
        ("data[0-2].csv", "data3.csv", False, False),
    ],
)
def test_ignore_patterns(pattern: str, path: str, is_dir: bool, expected: bool) -> None:
    assert IgnoreRules([pattern]).ignored(path, is_dir) is expected


def test_outside_git_root_and_home_need_an_explicit_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "a.py").write_text("a\n")
    monkeypatch.setenv("HOME", str(home))
    for refused in (home, Path("/")):  # refused before walking anything
        with pytest.raises(ShippingError, match=r"not in a git repository.*--dir DIR"):
            snapshot(refused, tmp_path / "cache", 10**9)
    snap = snapshot(home, tmp_path / "cache", 10**9, explicit=True)
    assert set(_names(snap.tarball)) == {"a.py"}


def test_outside_git_unreadable_entries_are_skipped_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "plain"
    (d / "locked").mkdir(parents=True)
    (d / "locked" / "x.py").write_text("x\n")
    (d / "a.py").write_text("a\n")
    (d / "secret.key").write_text("k\n")
    real_scandir, real_access = os.scandir, os.access

    def scandir(path: Any) -> Any:  # as for /proc/1/cwd or a 0700 dir of another user
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    def access(path: Any, mode: int) -> bool:
        return Path(path).name != "secret.key" and real_access(path, mode)

    monkeypatch.setattr(os, "scandir", scandir)
    monkeypatch.setattr(os, "access", access)
    snap = snapshot(d, tmp_path / "cache", 10**9)
    assert set(_names(snap.tarball)) == {"a.py"}
    assert snap.unreadable == 2 and snap.files == 1


def test_the_tarball_cache_evicts_least_recently_used_beyond_its_budget(tmp_path: Path) -> None:
    """Three snapshots of a changing tree: the oldest tarballs go, never the one in use."""
    import os

    tree, cache = tmp_path / "tree", tmp_path / "cache"
    tree.mkdir()
    shas = []
    for i in range(3):
        (tree / "blob.bin").write_bytes(os.urandom(100_000) + bytes([i]))
        snap = snapshot(tree, cache, 1 << 30, cache_max_bytes=250_000)
        os.utime(snap.tarball, (1000.0 + i, 1000.0 + i))  # distinct use times
        shas.append(snap.sha256)
    left = sorted(p.name for p in cache.glob("*.tar.gz"))
    assert left == sorted(f"{s}.tar.gz" for s in shas[1:])  # the first (least recent) went
    # re-using the second touches it: the next eviction takes the third instead
    (tree / "blob.bin").write_bytes(os.urandom(100_000) + bytes([1]))
    os.utime(cache / f"{shas[1]}.tar.gz", (5000.0, 5000.0))
    snap = snapshot(tree, cache, 1 << 30, cache_max_bytes=250_000)
    assert (cache / f"{shas[1]}.tar.gz").exists() and snap.tarball.exists()
    assert not (cache / f"{shas[2]}.tar.gz").exists()
    # a budget smaller than the snapshot itself keeps the one in use
    assert snapshot(tree, cache, 1 << 30, cache_max_bytes=1).tarball.exists()
