"""tcl.atomic: the one atomic writer every agent uses for its state files."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from tcl.atomic import write_atomic, write_json_atomic


class _Boom(Exception):
    pass


def test_replaces_whole_content_with_mode_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "task.json"
    write_json_atomic(target, {"v": 1})
    write_atomic(target, b'{"v": 2}', mode=0o640)
    assert json.loads(target.read_text()) == {"v": 2}
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert [p.name for p in target.parent.iterdir()] == ["task.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "status.json"
    write_atomic(target, "old")

    def fail_fsync(fd: int) -> None:
        raise _Boom

    monkeypatch.setattr("tcl.atomic.os.fsync", fail_fsync)
    with pytest.raises(_Boom):
        write_atomic(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]
