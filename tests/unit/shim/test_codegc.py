"""The host's code caches stay under their budget: least recently used first, in-use kept."""

from __future__ import annotations

import os
from pathlib import Path

from tcl.runner.codecache import CodeCache
from tcl.shim.codegc import CodeGc


def _sha(i: int) -> str:
    return f"{i:064x}"


def _tree(trees: Path, i: int, used_at: float) -> Path:
    path = trees / _sha(i)
    path.mkdir(parents=True)
    (path / "f").write_bytes(b"x" * 1000)
    os.utime(path, (used_at, used_at))
    return path


def _tarball(tarballs: Path, i: int, used_at: float) -> Path:
    tarballs.mkdir(exist_ok=True)
    path = tarballs / f"{_sha(i)}.tar.gz"
    path.write_bytes(b"y" * 1000)
    os.utime(path, (used_at, used_at))
    return path


def test_evicts_least_recently_used_trees_and_tarballs_but_never_in_use(tmp_path: Path) -> None:
    trees, tarballs = tmp_path / "code-cache" / "trees", tmp_path / "code"
    t1, t2, t3 = _tree(trees, 1, 100.0), _tree(trees, 2, 200.0), _tree(trees, 3, 300.0)
    b1, b4 = _tarball(tarballs, 1, 150.0), _tarball(tarballs, 4, 400.0)
    (trees / ".tmp-abc").mkdir()  # an extraction in progress: not ours
    (tarballs / f"{_sha(5)}.tar.gz.part-1").write_bytes(b"z" * 5000)  # an upload: not ours
    gc = CodeGc(trees, tarballs, max_bytes=3000, min_age_s=0)
    evicted = gc.collect(in_use={_sha(1)})  # task 1 runs: its tree and tarball stay
    assert set(evicted) == {t2, t3}
    assert t1.exists() and b1.exists() and b4.exists() and (trees / ".tmp-abc").exists()
    gc.max_bytes = 2000
    assert gc.collect(in_use=set()) == [t1]  # the least recent of what is left
    assert gc.collect(in_use=set()) == []  # under budget now


def test_recently_used_code_is_kept_and_a_lookup_touches_the_tree(tmp_path: Path) -> None:
    root = tmp_path / "code-cache"
    old = _tree(root / "trees", 1, 100.0)
    _tree(root / "trees", 2, 200.0)
    assert CodeCache(root).tree(_sha(1)) == old  # a runner looked it up: used now
    gc = CodeGc(root / "trees", None, max_bytes=1000, min_age_s=600)
    assert gc.collect(in_use=set()) == [root / "trees" / _sha(2)]
    assert old.exists()


def test_a_partial_upload_left_for_a_day_is_removed(tmp_path: Path) -> None:
    tarballs = tmp_path / "code"
    tarballs.mkdir()
    old, fresh = tarballs / f"{_sha(1)}.tar.gz.part-7", tarballs / f"{_sha(2)}.tar.gz.part-8"
    for path in (old, fresh):
        path.write_bytes(b"z")
    os.utime(old, (100.0, 100.0))
    gc = CodeGc(tmp_path / "trees", tarballs, max_bytes=1 << 30)
    assert gc.collect(in_use=set()) == [old] and fresh.exists()
