"""`@tcl.remote` from a real Jupyter kernel (nbclient + ipykernel from the project's env) on
the local default (no config): the first call submits a `remote` session run (the repo is
shipped, so the notebook's own modules import remotely), every call goes through the runner's
forward, and the globals the function changed come back. Any cell that raises fails the test."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration.tclcli import TCL, stop_local_shim_and_tasks
from tests.notebook import cell_text, run_notebook, write_back_cells

SETUP = """
import numpy as np, jax, jax.numpy as jnp, threading
import tcl
from tcl.remote import decorator
"""
# The repo around the notebook is shipped: its own modules import remotely; the session is a run.
WHERE = """
@tcl.remote
def where():
    import os
    from helpers import scale
    return os.environ["TCL_RUN_ID"], scale(5)

run_id, five = where()
assert run_id.startswith("run-") and five == 5, (run_id, five)
"""


@pytest.mark.timeout(420)
def test_tcl_remote_in_a_real_notebook_on_the_local_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, repo = tmp_path / "home", tmp_path / "repo"
    home.mkdir()
    repo.mkdir()
    (repo / "helpers.py").write_text("def scale(x):\n    return x\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "i"]):
        subprocess.run(
            ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
            check=True,
            capture_output=True,
        )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TCL_STATE_DIR", str(home / "state"))
    monkeypatch.delenv("TCL_CONFIG", raising=False)
    monkeypatch.delenv("TCL_DB_URL", raising=False)

    cells = [SETUP, *write_back_cells("tcl.remote"), WHERE, "decorator.close_sessions()"]
    try:
        nb = run_notebook(cells, tmp_path, monkeypatch, repo, timeout_s=240)
        assert "remote says hi" in cell_text(nb, 3), nb.cells[3].outputs
        runs = json.loads(
            subprocess.run(
                [TCL, "ps", "-a", "--json"], capture_output=True, text=True, check=True
            ).stdout
        )
        (run,) = runs
        assert run["session"] == "remote" and run["state"] == "terminated", run  # closed
    finally:
        stop_local_shim_and_tasks(home / "state" / "local-shim")
