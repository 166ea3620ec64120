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

    assert prune(mine, 86400) == {"removed": 1, "error": ""}
    assert not (runs / "r-old").exists()  # ended 2 days ago: gone, its empty run dir too
    assert (mine / ENDED).exists() and (mine / "spec.json").exists()  # ended now: kept a day
    assert (live / "spec.json").exists() and beside.exists()  # not released: left alone

    assert prune(mine, 0) == {"removed": 1, "error": ""}  # no retention: at once
    assert not (runs / "r-mine").exists() and (live / "spec.json").exists()


def test_a_dir_that_is_not_an_attempt_dir_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "home" / "user" / "0"
    elsewhere.mkdir(parents=True)
    answer = prune(elsewhere, 0)
    assert answer["removed"] == 0 and "not an attempt dir" in str(answer["error"])
    assert elsewhere.exists() and not (elsewhere / ENDED).exists()
