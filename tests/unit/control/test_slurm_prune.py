"""The SLURM release's pruning script, run as the login node runs it (``python -c SCRIPT``):
an attempt's dir marked ended, ended ones past the retention removed, nothing else touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tcl.control.backends.slurm import remote
from tcl.control.backends.slurm.scripts.prune import ENDED


def prune(attempt_dir: Path, retention_s: float) -> dict[str, object]:
    res = subprocess.run(
        [sys.executable, "-c", remote.PRUNE_PY, str(attempt_dir), f"{retention_s:g}"],
        capture_output=True,
        text=True,
        check=True,
    )
    answer: dict[str, object] = json.loads(res.stdout)
    return answer


def test_ended_attempt_dirs_go_after_their_retention_and_nothing_else(tmp_path: Path) -> None:
    runs = tmp_path / "work" / "tcl" / "runs"
    old, live, mine = runs / "r-old" / "0", runs / "r-live" / "0", runs / "r-mine" / "1"
    for d in (old, live, mine):
        (d / "a0" / "n0").mkdir(parents=True)
        (d / "spec.json").write_text("{}")
    (old / ENDED).touch()
    two_days_ago = time.time() - 2 * 86400
    os.utime(old / ENDED, (two_days_ago, two_days_ago))
    beside = tmp_path / "work" / "tcl" / "code.tar.gz"  # not a run dir: never touched
    beside.write_text("x")

    assert prune(mine, 86400) == {"removed": 1, "evicted": 0, "error": ""}
    assert not (runs / "r-old").exists()  # ended 2 days ago: gone, its empty run dir too
    assert (mine / ENDED).exists() and (mine / "spec.json").exists()  # ended now: kept a day
    assert (live / "spec.json").exists() and beside.exists()  # not released: left alone

    assert prune(mine, 0) == {"removed": 1, "evicted": 0, "error": ""}  # no retention: at once
    assert not (runs / "r-mine").exists() and (live / "spec.json").exists()


def test_a_dir_that_is_not_an_attempt_dir_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "home" / "user" / "0"
    elsewhere.mkdir(parents=True)
    answer = prune(elsewhere, 0)
    assert answer["removed"] == 0 and "not an attempt dir" in str(answer["error"])
    assert elsewhere.exists() and not (elsewhere / ENDED).exists()


def test_code_no_run_names_goes_once_older_than_the_retention(tmp_path: Path) -> None:
    """Issue 32: the content-addressed code tarballs are evicted too: those no attempt dir left
    names (its spec's code.sha256), once older than the retention and than an hour (a tarball
    shipped just before its run's dir is written is never taken)."""
    tcl = tmp_path / "work" / "tcl"
    runs, code = tcl / "runs", tcl / "code"
    code.mkdir(parents=True)
    mine, live = runs / "r-mine" / "0", runs / "r-live" / "0"
    for d, sha in ((mine, "a" * 64), (live, "b" * 64)):
        d.mkdir(parents=True)
        (d / "spec.json").write_text(json.dumps({"run_id": d.parent.name, "code": {"sha256": sha}}))
    two_days_ago = time.time() - 2 * 86400
    tarballs = {}
    for sha in ("a", "b", "c", "d"):
        tarballs[sha] = code / f"{sha * 64}.tar.gz"
        tarballs[sha].write_bytes(b"code")
        os.utime(tarballs[sha], (two_days_ago, two_days_ago))
    os.utime(tarballs["d"])  # shipped a moment ago, its run not written yet
    other = code / "notes.txt"  # not a tarball: never touched
    other.write_text("x")
    os.utime(other, (two_days_ago, two_days_ago))

    answer = prune(mine, 0)  # r-mine's dir goes, and with it the last name of "a"
    assert answer == {"removed": 1, "evicted": 2, "error": ""}
    assert sorted(p.name[0] for p in code.glob("*.tar.gz")) == ["b", "d"] and other.exists()
    assert prune(live, 3 * 86400)["evicted"] == 0  # "b" is named; the retention keeps the rest


# The script as the login node runs it, with an audit hook counting the spec files it opens.
_COUNTING = """
import sys
opened = []
sys.addaudithook(lambda event, args: event == "open" and opened.append(str(args[0])))
sys.argv = ["-c", *sys.argv[2:]]
try:
    exec(compile(sys.argv_script, "prune", "exec"), {"__name__": "__main__"})
except SystemExit:
    pass
print(sum(p.endswith("spec.json") for p in opened), file=sys.stderr)
"""


def test_specs_are_read_only_when_a_tarball_is_old_enough_to_go(tmp_path: Path) -> None:
    """A release on a cluster keeping many runs reads no spec file when no tarball could be
    evicted (every one used within the retention); one old tarball makes it read them."""
    tcl = tmp_path / "work" / "tcl"
    runs, code = tcl / "runs", tcl / "code"
    code.mkdir(parents=True)
    for i in range(50):
        d = runs / f"r{i}" / "0"
        d.mkdir(parents=True)
        (d / "spec.json").write_text(json.dumps({"code": {"sha256": "a" * 64}}))
    (code / f"{'a' * 64}.tar.gz").write_bytes(b"code")  # used a moment ago

    def spec_reads() -> int:
        script = _COUNTING.replace("sys.argv_script", repr(remote.PRUNE_PY))
        res = subprocess.run(
            [sys.executable, "-c", script, "x", str(runs / "r0" / "0"), "86400"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert json.loads(res.stdout)["error"] == ""
        return int(res.stderr.split()[-1])

    assert spec_reads() == 0
    stale = code / f"{'b' * 64}.tar.gz"
    stale.write_bytes(b"old code")
    two_days_ago = time.time() - 2 * 86400
    os.utime(stale, (two_days_ago, two_days_ago))
    assert spec_reads() == 50
    assert not stale.exists()
