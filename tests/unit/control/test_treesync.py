"""The workstation side of `tcl sync`, and the round trip: ship a git repo, edit it, patch
the remote copy, compare byte for byte."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from tcl.control import treesync
from tcl.control.errors import SyncError, TclError
from tcl.control.shipping import list_files, write_tarball
from tcl.control.treesync import (
    SyncState,
    changed_modules,
    make_patch,
    manifest_of_tarball,
    scan,
    tree_id,
)
from tcl.runner.api import SyncFile, SyncPatch
from tcl.runner.errors import StorageError, SyncConflict
from tcl.runner.treepatch import TreeSync, patch_id


def git(root: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.email=t@t", "-c", "user.name=t", *args],
        check=True,
        capture_output=True,
    )


def make_repo(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "model.py").write_text("def f():\n    return 1\n")
    (root / "pkg" / "old_name.py").write_text("X = 'a file that will be renamed'\n" * 20)
    (root / "gone.txt").write_text("to delete\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "link").symlink_to("pkg/model.py")
    (root / ".gitignore").write_text("*.log\n")
    (root / "ignored.log").write_text("never shipped\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "init")
    return root


def ship(root: Path, remote: Path, tmp: Path) -> Path:
    """What a submit does to put the tree on the runner: the tarball, extracted."""
    entries, _ = list_files(root, True)
    tarball = tmp / "code.tar.gz"
    write_tarball(root, entries, tarball)
    remote.mkdir()
    with tarfile.open(tarball) as tar:
        tar.extractall(remote, filter="tar")
    return tarball


def tree_of(root: Path) -> dict[str, tuple[str, bytes | str, int]]:
    """Every file, link and directory under ``root`` (not .git), files with content and the
    mode a submit ships."""
    out: dict[str, tuple[str, bytes | str, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p), 0)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", b"", 0)
            else:
                out[rel] = ("file", p.read_bytes(), 0o755 if st.st_mode & 0o111 else 0o644)
    return out


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "local")


def test_end_to_end_patch_makes_remote_identical(repo: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    tarball = ship(repo, remote, tmp_path)
    base = manifest_of_tarball(tarball)
    assert set(base.files) == {
        ".gitignore",
        "gone.txt",
        "link",
        "pkg/__init__.py",
        "pkg/model.py",
        "pkg/old_name.py",
        "run.sh",
    }
    assert scan(repo, True, None).files.keys() == base.files.keys()
    assert tree_id(scan(repo, True, None)) == tree_id(base)  # the tarball is the tree
    assert make_patch(repo, base, scan(repo, True, base)) is None

    (repo / "pkg" / "model.py").write_text("def f():\n    return 2\n")
    (repo / "pkg" / "new.py").write_text("Y = 1\n")
    (repo / "gone.txt").unlink()
    (repo / "pkg" / "old_name.py").rename(repo / "pkg" / "new_name.py")
    (repo / "blob.bin").write_bytes(os.urandom(3000) + b"\x00\x00\xff" + bytes(100))
    (repo / "run.sh").chmod(0o755)
    (repo / "link2").symlink_to("blob.bin")
    (repo / "more.log").write_text("ignored\n")
    now = scan(repo, True, base)
    patch = make_patch(repo, base, now)
    assert patch is not None
    by_path = {f.path: f for f in patch.files}
    assert by_path["pkg/new_name.py"].copy_from == "pkg/old_name.py"
    assert by_path["pkg/new_name.py"].data_b64 is None
    assert by_path["pkg/old_name.py"].sha256 is None
    assert by_path["run.sh"].mode == 0o755 and by_path["run.sh"].copy_from == "run.sh"
    assert "more.log" not in by_path
    assert patch.base == tree_id(base) and patch.new_base == tree_id(now)
    # it survives the wire
    patch = SyncPatch.model_validate_json(patch.model_dump_json())

    ts = TreeSync(remote, "code-sha")
    ack = ts.apply(patch)
    assert (ack.base, ack.applied, ack.already) == (tree_id(now), len(patch.files), False)
    local = {k: v for k, v in tree_of(repo).items() if k not in ("ignored.log", "more.log")}
    assert tree_of(remote) == local
    assert ts.apply(patch).already

    # a conflict: the remote file was edited there, and here too
    (remote / "pkg" / "model.py").write_text("remote edit\n")
    (repo / "pkg" / "model.py").write_text("local edit\n")
    (repo / "pkg" / "new.py").write_text("Y = 2\n")  # fine on its own
    before = tree_of(remote)
    with pytest.raises(SyncConflict) as err:
        ts.apply(make_patch(repo, now, scan(repo, True, now)))  # type: ignore[arg-type]
    assert err.value.paths == ["pkg/model.py"]
    assert tree_of(remote) == before
    assert [p for p in os.listdir(remote) if p.startswith(".tcl-sync")] == []


def test_rollback_leaves_the_remote_as_it_was(repo: Path, tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    base = manifest_of_tarball(ship(repo, remote, tmp_path))
    (repo / "pkg" / "model.py").write_text("changed\n")
    (repo / "gone.txt").unlink()
    (repo / "d" / "e").mkdir(parents=True)
    (repo / "d" / "e" / "f.txt").write_text("new\n")
    patch = make_patch(repo, base, scan(repo, True, base))
    assert patch is not None
    before = tree_of(remote)
    with pytest.raises(StorageError):
        TreeSync(remote, "x", _fail_at=3).apply(patch)
    assert tree_of(remote) == before


def test_scan_rehashes_only_changed_stat(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hour_ago = 1_000_000_000 * (int(time.time()) - 3600)
    for p in scan(repo, True, None).files:
        os.utime(repo / p, ns=(hour_ago, hour_ago), follow_symlinks=False)
    first = scan(repo, True, None)  # old enough to trust: the stat cache is filled
    hashed: list[str] = []
    real = treesync._sha_path

    def spy(path: Path) -> str:
        hashed.append(path.name)
        return real(path)

    monkeypatch.setattr(treesync, "_sha_path", spy)
    assert scan(repo, True, first) == first
    assert hashed == []
    (repo / "pkg" / "model.py").write_text("def f():\n    return 3\n")
    (repo / "run.sh").chmod(0o755)  # a mode change needs no hashing
    again = scan(repo, True, first)
    assert hashed == ["model.py"]
    assert again.files["pkg/model.py"].sha256 != first.files["pkg/model.py"].sha256
    assert again.files["run.sh"].mode == 0o755


def test_racy_files_are_hashed_again(repo: Path) -> None:
    first = scan(repo, True, None)  # every file was just written: none is trusted yet
    assert all(e.mtime_ns is None for p, e in first.files.items() if e.link is None)
    (repo / "gone.txt").write_text("same size\n"[:10])
    assert scan(repo, True, first).files["gone.txt"].sha256 != first.files["gone.txt"].sha256


def test_size_cap_names_the_largest(repo: Path) -> None:
    base = scan(repo, True, None)
    (repo / "big.bin").write_bytes(os.urandom(5000))
    (repo / "small.bin").write_bytes(os.urandom(10))
    with pytest.raises(SyncError, match=r"big\.bin.*small\.bin") as err:
        make_patch(repo, base, scan(repo, True, base), max_bytes=4000)
    assert isinstance(err.value, TclError)


def test_file_changed_after_scan_is_refused(repo: Path) -> None:
    base = scan(repo, True, None)
    (repo / "pkg" / "model.py").write_text("one\n")
    now = scan(repo, True, base)
    (repo / "pkg" / "model.py").write_text("two\n")
    with pytest.raises(SyncError, match="changed while syncing"):
        make_patch(repo, base, now)


def test_patch_id_matches_the_runner(repo: Path) -> None:
    base = scan(repo, True, None)
    (repo / "x.py").write_text("x\n")
    p = make_patch(repo, base, scan(repo, True, base))
    assert p is not None and p.id == patch_id(p.base, p.new_base, p.files)


def test_changed_modules() -> None:
    def f(path: str, deleted: bool = False) -> SyncFile:
        return SyncFile(path=path, sha256=None if deleted else "0" * 64, data_b64="")

    files = [
        f("src/pkg/mod.py"),
        f("src/pkg/__init__.py"),
        f("src/pkg/sub/deep.py"),
        f("tools/helper.py"),  # outside the cwd: relative to the root
        f("src/my-script.py"),  # not importable
        f("src/pkg/gone.py", deleted=True),
        f("src/data.txt"),
        f("src/pkg/mod.py.bak"),
    ]
    p = SyncPatch(id="0" * 64, base="a", new_base="b", files=files)
    assert changed_modules(p, "src") == ["pkg", "pkg.mod", "pkg.sub.deep", "tools.helper"]
    assert changed_modules(p, "./src/") == changed_modules(p, "src")
    assert changed_modules(p, ".") == changed_modules(p, "")
    assert changed_modules(p, "") == [
        "src.pkg",
        "src.pkg.mod",
        "src.pkg.sub.deep",
        "tools.helper",
    ]


def test_sync_state_round_trip_and_damage(repo: Path, tmp_path: Path) -> None:
    m = scan(repo, True, None)
    state = SyncState("r-1", repo, True, "pkg", tree_id(m), m)
    path = tmp_path / "state" / "sync.json"
    state.save(path)
    assert SyncState.load(path) == state
    path.write_text("{not json")
    with pytest.raises(SyncError, match=str(path)):
        SyncState.load(path)
    path.write_text(json.dumps({"version": 0}))
    with pytest.raises(SyncError, match="version"):
        SyncState.load(path)
    path.write_text(json.dumps({"version": 1, "run_id": "r"}))
    with pytest.raises(SyncError, match="damaged"):
        SyncState.load(path)
    with pytest.raises(FileNotFoundError):
        SyncState.load(tmp_path / "none.json")


def test_no_git_tree(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    root.mkdir()
    (root / "a.py").write_text("a\n")
    base = scan(root, False, None)
    (root / "b.py").write_text("a\n")
    p = make_patch(root, base, scan(root, False, base))
    assert p is not None and [(f.path, f.copy_from) for f in p.files] == [("b.py", "a.py")]
