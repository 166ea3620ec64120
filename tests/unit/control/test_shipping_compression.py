"""Whether a snapshot is gzipped: a tree whose bytes gzip would not shrink (random data,
checkpoints, archives) ships as a plain tar, read back by the runner and the sync manifest as
the gzipped one is; a tree of text, and any small tree, is gzipped."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tcl.control.shipping import ALWAYS_GZIP_BYTES, list_files, write_tarball
from tcl.control.treesync import manifest_of_tarball, scan, tree_id
from tcl.runner.code import extract

MIB = 1024 * 1024
GZIP_MAGIC = b"\x1f\x8b"


def _text(n: int, seed: int) -> bytes:
    rng = random.Random(seed)
    words = [b"step", b"loss", b"params", b"jax.numpy", b"def", b"return", b"self", b"=", b"\n"]
    return b" ".join(rng.choice(words) for _ in range(n // 5))[:n]


def _tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


def _ship(root: Path, dest: Path) -> tuple[str, bytes]:
    entries, _ = list_files(root, False)
    sha = write_tarball(root, entries, dest)
    return sha, dest.read_bytes()[:2]


@pytest.mark.parametrize(
    ("kind", "gzipped"),
    [("random", False), ("text", True), ("small-random", True), ("mostly-text", True)],
)
def test_a_tree_is_gzipped_only_where_gzip_would_shrink_it(
    tmp_path: Path, kind: str, gzipped: bool
) -> None:
    rng = random.Random(kind)
    files: dict[str, bytes] = {}
    if kind == "random":  # a checkpoint's worth of incompressible files, and a script
        files = {f"ckpt/shard{i:02d}.bin": rng.randbytes(MIB) for i in range(12)}
        files["train.py"] = b"print('hi')\n"
    elif kind == "text":
        files = {f"src/m{i:02d}.py": _text(MIB, i) for i in range(12)}
    elif kind == "small-random":
        files = {"blob.bin": rng.randbytes(ALWAYS_GZIP_BYTES // 2)}
    else:  # three quarters text: gzip still wins
        files = {f"src/m{i:02d}.py": _text(MIB, i) for i in range(9)}
        files |= {f"data/r{i}.bin": rng.randbytes(MIB) for i in range(3)}
    root = _tree(tmp_path / "tree", files)
    sha, magic = _ship(root, tmp_path / "a.tar.gz")
    assert (magic == GZIP_MAGIC) is gzipped

    # the same tree, the same bytes: its hash still names its content
    assert _ship(root, tmp_path / "b.tar.gz")[0] == sha
    # the runner unpacks it, and the sync manifest of the shipped tarball is the tree's
    assert extract(tmp_path / "a.tar.gz", tmp_path / "work") == len(files)
    for rel, data in files.items():
        assert (tmp_path / "work" / rel).read_bytes() == data, rel
    assert tree_id(manifest_of_tarball(tmp_path / "a.tar.gz")) == tree_id(scan(root, False, None))
