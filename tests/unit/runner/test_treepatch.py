"""Applying sync patches on the runner: content, modes, links, conflicts, rollback, escapes."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import threading
from pathlib import Path

import pytest

from tcl.runner.api import SyncFile, SyncPatch
from tcl.runner.errors import InvalidRequest, StorageError, SyncConflict
from tcl.runner.treepatch import TreeSync, patch_id


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def put(path: str, data: bytes, old: bytes | None = None, mode: int = 0o644) -> SyncFile:
    return SyncFile(
        path=path,
        old_sha256=None if old is None else sha(old),
        sha256=sha(data),
        mode=mode,
        data_b64=base64.b64encode(data).decode(),
    )


def delete(path: str, old: bytes) -> SyncFile:
    return SyncFile(path=path, old_sha256=sha(old), sha256=None)


def patch(*files: SyncFile, base: str = "b0", new: str = "b1") -> SyncPatch:
    fs = list(files)
    return SyncPatch(id=patch_id(base, new, fs), base=base, new_base=new, files=fs)


def snapshot(root: Path) -> dict[str, tuple[str, bytes | str, int]]:
    """Every entry under ``root``: files by content and mode, links by target, dirs."""
    out: dict[str, tuple[str, bytes | str, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p), 0)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", b"", 0)
            else:
                out[rel] = ("file", p.read_bytes(), stat.S_IMODE(st.st_mode))
    return out


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "a.py").write_bytes(b"a = 1\n")
    (root / "pkg" / "b.py").write_bytes(b"b = 1\n")
    (root / "top.txt").write_bytes(b"top\n")
    return root


def test_patch_id_is_canonical_and_order_sensitive() -> None:
    f1, f2 = put("a", b"1"), put("b", b"2")
    assert patch_id("x", "y", [f1, f2]) == patch_id("x", "y", [f1, f2])
    assert patch_id("x", "y", [f1, f2]) != patch_id("x", "y", [f2, f1])
    assert patch_id("x", "y", [f1]) != patch_id("x", "z", [f1])


def test_apply_add_modify_delete_link_mode(tree: Path) -> None:
    ts = TreeSync(tree, "b0")
    p = patch(
        put("pkg/a.py", b"a = 2\n", old=b"a = 1\n"),
        put("new/deep/c.py", b"\x00\x01bin\x00"),
        delete("top.txt", b"top\n"),
        SyncFile(path="ln", sha256=sha("pkg/a.py"), link="pkg/a.py", mode=0o777),
        SyncFile(
            path="pkg/b.py",
            old_sha256=sha(b"b = 1\n"),
            sha256=sha(b"b = 1\n"),
            mode=0o755,
            copy_from="pkg/b.py",
        ),
    )
    ack = ts.apply(p)
    assert (ack.base, ack.applied, ack.already) == ("b1", 5, False)
    assert ts.base == "b1"
    assert (tree / "pkg/a.py").read_bytes() == b"a = 2\n"
    assert (tree / "new/deep/c.py").read_bytes() == b"\x00\x01bin\x00"
    assert not (tree / "top.txt").exists()
    assert os.readlink(tree / "ln") == "pkg/a.py"
    assert stat.S_IMODE((tree / "pkg/b.py").stat().st_mode) == 0o755
    assert [p.name for p in tree.iterdir() if p.name.startswith(".tcl-sync")] == []


def test_rename_reads_source_before_delete(tree: Path) -> None:
    ts = TreeSync(tree, "b0")
    ts.apply(
        patch(
            SyncFile(path="moved/a.py", sha256=sha(b"a = 1\n"), copy_from="pkg/a.py"),
            delete("pkg/a.py", b"a = 1\n"),
        )
    )
    assert (tree / "moved/a.py").read_bytes() == b"a = 1\n"
    assert not (tree / "pkg/a.py").exists()
    assert (tree / "pkg").is_dir()  # b.py is still there


def test_delete_prunes_empty_dirs_not_root(tree: Path) -> None:
    ts = TreeSync(tree, "b0")
    ts.apply(patch(delete("pkg/a.py", b"a = 1\n"), delete("pkg/b.py", b"b = 1\n")))
    assert not (tree / "pkg").exists()
    ts.apply(patch(delete("top.txt", b"top\n"), base="b1", new="b2"))
    assert tree.is_dir() and list(tree.iterdir()) == []


def test_file_becomes_directory_and_back(tree: Path) -> None:
    ts = TreeSync(tree, "b0")
    ts.apply(patch(delete("top.txt", b"top\n"), put("top.txt/inner", b"x")))
    assert (tree / "top.txt/inner").read_bytes() == b"x"
    ts.apply(patch(delete("top.txt/inner", b"x"), put("top.txt", b"y"), new="b2"))
    assert (tree / "top.txt").read_bytes() == b"y"


def test_retry_is_recognised(tree: Path) -> None:
    ts = TreeSync(tree, "b0")
    p = patch(put("pkg/a.py", b"a = 2\n", old=b"a = 1\n"))
    assert ts.apply(p).applied == 1
    again = ts.apply(p)
    assert (again.base, again.applied, again.already) == ("b1", 0, True)


def test_already_applied_content_is_not_a_conflict(tree: Path) -> None:
    (tree / "pkg/a.py").write_bytes(b"a = 2\n")  # the user made the same edit remotely
    ts = TreeSync(tree, "b0")
    assert ts.apply(patch(put("pkg/a.py", b"a = 2\n", old=b"a = 1\n"))).applied == 1
    assert (tree / "pkg/a.py").read_bytes() == b"a = 2\n"


def test_conflicts_are_all_named_and_nothing_changes(tree: Path) -> None:
    (tree / "pkg/a.py").write_bytes(b"remote edit\n")
    (tree / "extra").write_bytes(b"remote new\n")
    before = snapshot(tree)
    ts = TreeSync(tree, "b0")
    p = patch(
        put("pkg/a.py", b"a = 2\n", old=b"a = 1\n"),
        put("extra", b"local new\n"),
        put("pkg/b.py", b"b = 2\n", old=b"b = 1\n"),  # fine on its own
        delete("top.txt", b"top\n"),
    )
    with pytest.raises(SyncConflict) as err:
        ts.apply(p)
    assert err.value.paths == ["extra", "pkg/a.py"]
    assert "extra" in err.value.detail and "pkg/a.py" in err.value.detail
    assert err.value.code == "sync_conflict"
    assert snapshot(tree) == before
    assert ts.base == "b0"


def test_conflict_message_is_capped() -> None:
    err = SyncConflict([f"f{i:02d}" for i in range(25)])
    assert "f19" in err.detail and "f20" not in err.detail and "and 5 more" in err.detail


def test_changed_copy_source_is_a_conflict(tree: Path) -> None:
    (tree / "pkg/a.py").write_bytes(b"changed\n")
    with pytest.raises(SyncConflict) as err:
        TreeSync(tree, "b0").apply(
            patch(SyncFile(path="c.py", sha256=sha(b"a = 1\n"), copy_from="pkg/a.py"))
        )
    assert err.value.paths == ["pkg/a.py"]
    assert not (tree / "c.py").exists()


def _mixed_patch() -> SyncPatch:
    return patch(
        put("pkg/a.py", b"a = 2\n", old=b"a = 1\n"),
        put("new/deep/c.py", b"c"),
        delete("top.txt", b"top\n"),
        SyncFile(path="moved.py", sha256=sha(b"b = 1\n"), copy_from="pkg/b.py"),
        delete("pkg/b.py", b"b = 1\n"),
    )


# its commit: 3 backups, rmdir pkg (emptied), mkdir pkg + place a.py, mkdir new, new/deep +
# place c.py, place moved.py: 10 steps
@pytest.mark.parametrize("fail_at", range(10))
def test_failure_mid_commit_rolls_back(tree: Path, fail_at: int) -> None:
    before = snapshot(tree)
    ts = TreeSync(tree, "b0", _fail_at=fail_at)
    with pytest.raises(StorageError, match="rolled back"):
        ts.apply(_mixed_patch())
    assert snapshot(tree) == before
    assert ts.base == "b0"
    # the same patch applies once the fault is gone (nothing was recorded as applied)
    ts._fail_at = None
    assert ts.apply(_mixed_patch()).applied == 5


def test_every_commit_step_was_covered(tree: Path) -> None:
    TreeSync(tree, "b0", _fail_at=10).apply(_mixed_patch())  # step 10 is never reached
    assert (tree / "moved.py").read_bytes() == b"b = 1\n"
    assert not (tree / "pkg/b.py").exists() and (tree / "pkg/a.py").read_bytes() == b"a = 2\n"


def test_bad_data_and_bad_ids_are_invalid(tree: Path) -> None:
    ts = TreeSync(tree, "b0")
    good = put("pkg/a.py", b"a = 2\n", old=b"a = 1\n")
    forged = SyncPatch(id="0" * 64, base="b0", new_base="b1", files=[good])
    with pytest.raises(InvalidRequest, match="id"):
        ts.apply(forged)
    lying = good.model_copy(update={"data_b64": base64.b64encode(b"other").decode()})
    with pytest.raises(InvalidRequest, match="sha256"):
        ts.apply(patch(lying))
    no_content = SyncFile(path="x", sha256=sha(b"x"))
    with pytest.raises(InvalidRequest, match="content source"):
        ts.apply(patch(no_content))
    bad_link = SyncFile(path="x", sha256=sha(b"x"), link="y")
    with pytest.raises(InvalidRequest, match="link"):
        ts.apply(patch(bad_link))
    assert (tree / "pkg/a.py").read_bytes() == b"a = 1\n"


@pytest.mark.parametrize("path", ["a/.git/config", ".git/hooks/x", "a//b", "./a", "a/./b"])
def test_bad_paths_are_refused(tree: Path, path: str) -> None:
    with pytest.raises(InvalidRequest):
        TreeSync(tree, "b0").apply(patch(put(path, b"x")))


def test_dotdot_is_refused_by_the_schema_and_the_runner(tree: Path) -> None:
    with pytest.raises(ValueError):
        put("../x", b"x")
    # the runner checks again, whatever built the model
    sneaky = SyncFile.model_construct(path="../x", sha256=sha(b"x"), data_b64="eA==")
    with pytest.raises(InvalidRequest):
        TreeSync(tree, "b0").apply(patch(sneaky))
    assert not (tree.parent / "x").exists()


def test_symlinked_parent_is_refused(tree: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_bytes(b"keep")
    (tree / "escape").symlink_to(outside)
    ts = TreeSync(tree, "b0")
    for f in (
        put("escape/new", b"x"),
        put("escape/victim", b"x", old=b"keep"),
        delete("escape/victim", b"keep"),
        SyncFile(path="stolen", sha256=sha(b"keep"), copy_from="escape/victim"),
    ):
        with pytest.raises(InvalidRequest, match="symlink"):
            ts.apply(patch(f))
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    assert (outside / "victim").read_bytes() == b"keep"
    assert not (tree / "stolen").exists()


def test_a_symlink_target_is_replaced_not_written_through(tree: Path, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep")
    (tree / "ln").symlink_to(victim)
    TreeSync(tree, "b0").apply(patch(put("ln", b"new", old=str(victim).encode())))
    assert victim.read_bytes() == b"keep"
    assert not (tree / "ln").is_symlink() and (tree / "ln").read_bytes() == b"new"


def test_symlink_replaced_by_directory(tree: Path, tmp_path: Path) -> None:
    (tree / "lib").symlink_to(tmp_path)
    TreeSync(tree, "b0").apply(
        patch(
            SyncFile(path="lib", old_sha256=sha(str(tmp_path)), sha256=None),
            put("lib/x.py", b"x"),
        )
    )
    assert (tree / "lib").is_dir() and not (tree / "lib").is_symlink()
    assert not (tmp_path / "x.py").exists()


def test_concurrent_retries_apply_once(tree: Path) -> None:
    ts = TreeSync(tree, "b0")
    p = patch(put("pkg/a.py", b"a = 2\n", old=b"a = 1\n"))
    acks = []
    threads = [threading.Thread(target=lambda: acks.append(ts.apply(p))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(a.already for a in acks) == [False] + [True] * 7


def test_one_change_in_a_big_tree_hashes_only_its_path(tmp_path: Path) -> None:
    root = tmp_path / "big"
    for i in range(200):
        d = root / f"d{i}"
        d.mkdir(parents=True)
        (d / "f").write_bytes(b"x" * 1000)
    opened: list[str] = []
    real_open = os.open

    def spy(path: str, *a: int, **k: int) -> int:
        opened.append(str(path))
        return real_open(path, *a, **k)

    ts = TreeSync(root, "b0")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "open", spy)
        ts.apply(patch(put("d7/f", b"y", old=b"x" * 1000)))
    assert all("d7/f" in p or ".tcl-sync-" in p for p in opened), opened


def test_swap_two_files(tree: Path) -> None:
    a, b = b"a = 1\n", b"b = 1\n"
    TreeSync(tree, "b0").apply(
        patch(
            SyncFile(path="pkg/a.py", old_sha256=sha(a), sha256=sha(b), copy_from="pkg/b.py"),
            SyncFile(path="pkg/b.py", old_sha256=sha(b), sha256=sha(a), copy_from="pkg/a.py"),
        )
    )
    assert (tree / "pkg/a.py").read_bytes() == b and (tree / "pkg/b.py").read_bytes() == a


def test_stale_staging_dir_is_removed(tree: Path) -> None:
    (tree / ".tcl-sync-old" / "b0").mkdir(parents=True)
    TreeSync(tree, "b0")
    assert not (tree / ".tcl-sync-old").exists()
    with pytest.raises(InvalidRequest, match="reserved"):
        TreeSync(tree, "b0").apply(patch(put(".tcl-sync-x/f", b"x")))
