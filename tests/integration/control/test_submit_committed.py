"""`tcl submit --committed` on the local default: the job sees HEAD's files, and the submit
says what of the working tree it left out (issue 32)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.tclcli import run_tcl, stop_local_shim_and_tasks, user_env
from tests.unit.control.test_shipping import _git


def test_committed_ships_head_and_names_what_it_left_out(tmp_path: Path) -> None:
    home, repo = tmp_path / "home", tmp_path / "repo"
    home.mkdir()
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "train.py").write_text("print('committed')\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "one")
    (repo / "train.py").write_text("print('edited')\n")
    env = user_env(home, drop=("TCL_CONFIG", "TCL_DB_URL"))
    try:
        res = run_tcl(["submit", "--committed", "--", "python3", "train.py"], env, repo)
        assert res.stdout == "committed\n", res.stderr
        assert "--committed: shipping HEAD " in res.stderr and "M train.py" in res.stderr
        res = run_tcl(["submit", "--", "python3", "train.py"], env, repo)
        assert res.stdout == "edited\n", res.stderr  # the default: the working tree
    finally:
        stop_local_shim_and_tasks(home / "state" / "local-shim")
