"""Issue 26: the state dir and the code cache are the user's alone. Directories 0700, files 0600
whatever the umask; a pre-existing directory of ours with group/other bits is tightened, one of
another user is refused with one line naming it and the fix."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tcl.control.errors import TclError
from tcl.control.logcache import LogCache
from tcl.control.paths import cache_dir, db_url, logs_dir, ssh_dir, state_dir
from tcl.control.runrequest import RunRequest
from tcl.control.shipping import snapshot
from tcl.control.store import Store
from tcl.runner.api import Event, EventKind, LogStream

_NOBODY = 65534


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, umask022: None) -> Path:
    path = tmp_path / "state"
    monkeypatch.setenv("TCL_STATE_DIR", str(path))
    monkeypatch.delenv("TCL_CODE_CACHE_DIR", raising=False)
    monkeypatch.delenv("TCL_DB_URL", raising=False)
    return path


def _foreign_dir(tmp_path: Path) -> Path:
    """A directory another user owns (as root: one handed to nobody; else: ``/``, root's)."""
    if os.geteuid() != 0:
        return Path("/")
    path = tmp_path / "theirs"
    path.mkdir(mode=0o755)
    os.chown(path, _NOBODY, _NOBODY)
    return path


def test_a_state_dir_of_ours_is_made_and_tightened_0700(state: Path) -> None:
    assert _mode(state_dir()) == 0o700  # made under umask 022
    state.chmod(0o755)
    for sub in ("logs", "code", "ssh"):
        (state / sub).mkdir(mode=0o755)
    assert state_dir() == state and _mode(state) == 0o700
    for made in (logs_dir(), cache_dir(), ssh_dir()):
        assert _mode(made) == 0o700, made


def test_a_state_dir_of_another_user_is_refused(
    state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    theirs = _foreign_dir(tmp_path)
    before = _mode(theirs)
    monkeypatch.setenv("TCL_STATE_DIR", str(theirs))
    with pytest.raises(TclError) as e:
        state_dir()
    assert str(e.value) == (
        f"{theirs} belongs to another user (uid {theirs.stat().st_uid}), who could read or "
        "change what tcl keeps there: set TCL_STATE_DIR to a directory of your own"
    )
    assert _mode(theirs) == before  # not touched


def test_a_code_cache_dir_is_tightened_or_refused(
    state: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ours = tmp_path / "team-code"
    ours.mkdir(mode=0o777)
    ours.chmod(0o777)
    monkeypatch.setenv("TCL_CODE_CACHE_DIR", str(ours))
    assert cache_dir() == ours and _mode(ours) == 0o700
    theirs = _foreign_dir(tmp_path)
    monkeypatch.setenv("TCL_CODE_CACHE_DIR", str(theirs))
    with pytest.raises(TclError, match="set TCL_CODE_CACHE_DIR to a directory of your own"):
        cache_dir()


def test_the_database_and_its_wal_files_are_0600(state: Path) -> None:
    store = Store(db_url())
    try:
        store.create_run("r-000001", "r", RunRequest(argv=["true"]))
        files = sorted(p.name for p in state.glob("tcl.db*"))
        assert {"tcl.db", "tcl.db-wal", "tcl.db-shm"} <= set(files)
        assert {name: _mode(state / name) for name in files} == dict.fromkeys(files, 0o600)
    finally:
        store.close()


def test_a_database_made_before_is_tightened(state: Path) -> None:
    first = Store(db_url())  # open: its -wal and -shm files stay
    try:
        first.create_run("r-000001", "r", RunRequest(argv=["true"]))
        files = sorted(p.name for p in state.glob("tcl.db*"))
        assert {"tcl.db", "tcl.db-wal", "tcl.db-shm", "tcl.db.schema-lock"} <= set(files)
        for name in files:
            (state / name).chmod(0o644)  # as an older tcl left them
        Store(db_url()).close()
        assert {name: _mode(state / name) for name in files} == dict.fromkeys(files, 0o600)
    finally:
        first.close()


def test_kept_logs_are_0600(state: Path) -> None:
    cache = LogCache("r-000001")
    event = Event(seq=1, ts=0.0, kind=EventKind.LOG, stream=LogStream.STDOUT, data="x\n")
    cache.append([event])
    assert _mode(cache.path) == 0o600 and _mode(cache.path.parent) == 0o700


def test_code_snapshots_are_0600_in_0700_dirs(state: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.py").write_text("print(1)\n")
    snap = snapshot(tree, cache_dir(), 1 << 20, explicit=True)
    assert _mode(snap.tarball) == 0o600
    [index] = (cache_dir() / "index").iterdir()
    assert _mode(index.parent) == 0o700 and _mode(index) == 0o600
