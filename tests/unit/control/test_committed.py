"""`--committed`: HEAD's files as committed (not the working tree's edits or new files), in the
same deterministic tarball, cached by commit; what is left out is listed (issue 32)."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import pytest

from tcl.control.committed import committed_snapshot, uncommitted
from tcl.control.errors import ShippingError
from tcl.control.shipping import snapshot
from tests.unit.control.test_shipping import _git, _names

MiB = 1 << 20


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = tmp_path / "repo"
    (r / "pkg").mkdir(parents=True)
    _git(r, "init", "-q")
    (r / "train.py").write_text("print('committed')\n")
    (r / "pkg" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (r / "pkg" / "run.sh").chmod(0o755)
    os.symlink("train.py", r / "link.py")
    (r / "secret.env").write_text("K=1\n")
    (r / ".tclignore").write_text("secret.env\n")
    _git(r, "add", "-A")
    _git(r, "commit", "-q", "-m", "one")
    # the working tree moves on: an edit, a new file, a deletion
    (r / "train.py").write_text("print('uncommitted edit')\n")
    (r / "new.py").write_text("x = 1\n")
    (r / "pkg" / "run.sh").unlink()
    return r


def test_head_is_shipped_as_committed(repo: Path, tmp_path: Path) -> None:
    snap = committed_snapshot(repo, tmp_path / "cache", 10 * MiB)
    files = _names(snap.tarball)
    assert files["train.py"] == b"print('committed')\n"
    assert files["pkg/run.sh"] == b"#!/bin/sh\necho hi\n"  # deleted here, committed there
    assert "new.py" not in files and "secret.env" not in files  # untracked; .tclignore
    with tarfile.open(snap.tarball) as t:
        assert t.getmember("pkg/run.sh").mode == 0o755
        assert t.getmember("train.py").mode == 0o644
        link = t.getmember("link.py")
        assert link.issym() and link.linkname == "train.py"
    # the working tree's snapshot is another tarball: it has the edit
    work = snapshot(repo, tmp_path / "cache", 10 * MiB)
    assert work.sha256 != snap.sha256 and _names(work.tarball)["train.py"].startswith(b"print('un")
    left = uncommitted(repo)
    assert any(x.endswith("train.py") for x in left) and any("new.py" in x for x in left), left


def test_the_same_commit_is_the_same_tarball_from_the_cache_or_built(
    repo: Path, tmp_path: Path
) -> None:
    first = committed_snapshot(repo, tmp_path / "a", 10 * MiB)
    again = committed_snapshot(repo, tmp_path / "a", 10 * MiB)  # from the index
    fresh = committed_snapshot(repo, tmp_path / "b", 10 * MiB)  # built anew elsewhere
    assert first.sha256 == again.sha256 == fresh.sha256
    assert first.tarball.read_bytes() == fresh.tarball.read_bytes()


def test_a_repository_without_a_commit_or_no_repository_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    _git(empty, "init", "-q")
    with pytest.raises(ShippingError, match="has no commit yet"):
        committed_snapshot(empty, tmp_path / "c", MiB)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(ShippingError, match="not in a git repository"):
        committed_snapshot(plain, tmp_path / "c", MiB)
