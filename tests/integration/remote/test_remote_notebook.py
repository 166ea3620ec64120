"""`@tcl.remote` from a real Jupyter kernel (nbclient + ipykernel from the project's env) on
the local default (no config): the first call submits a `remote` session run (the repo is
shipped, so the notebook's own modules import remotely), every call goes through the runner's
forward, and the globals the function changed come back. Any cell that raises fails the test."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tcl.control.localshim import stop_local_shim
from tests.integration.tclcli import TCL

REPO = Path(__file__).resolve().parents[3]

CELLS = [
    """
import numpy as np, jax, jax.numpy as jnp, threading
import tcl
from tcl.remote import decorator
from helpers import scale  # the notebook's repo: shipped, so it imports remotely too
""",
    """
history = [0]
alias = history
counter = 1
config = {"lr": 0.1}
big = np.ones(4 * 1024 * 1024, dtype=np.float32)  # 16 MiB, only read
params = jnp.ones(3)
""",
    """
def helper(n):
    config["calls"] = n

@tcl.remote
def step(n):
    global counter, created, params
    import os
    history.append(n)
    counter += n
    created = "new global"
    helper(n)
    params = params * scale(2)
    print("remote says hi from", os.environ["TCL_RUN_ID"])
    return float(big[:2].sum()) + n
""",
    "result = step(3)",
    """
assert result == 5.0, result
assert history == [0, 3] and alias is history
assert counter == 4 and created == "new global"
assert config == {"lr": 0.1, "calls": 3}
assert isinstance(params, jax.Array) and params.tolist() == [2.0, 2.0, 2.0]
assert step.last_stats.bytes_received < 1024 * 1024, step.last_stats  # big not sent back
assert step.last_stats.bytes_sent > 16 * 1024 * 1024
assert step(1) == 3.0 and history == [0, 3, 1] and counter == 5  # the same warm session
""",
    """
lock = threading.Lock()

@tcl.remote
def locked():
    with lock:
        return 1

try:
    locked()
except Exception as e:
    err = e
assert type(err).__name__ == "UnpicklableError" and "global 'lock' (_thread.lock)" in str(err), err
""",
    """
@tcl.remote
def boom():
    x = 0
    return 1 / x  # remote boom line

try:
    boom()
except ZeroDivisionError as e:
    remote_tb = str(e.__cause__)
assert "return 1 / x  # remote boom line" in remote_tb, remote_tb
""",
    "decorator.close_sessions()",
]


@pytest.mark.timeout(420)
def test_tcl_remote_in_a_real_notebook_on_the_local_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "tcl test", "language": "python"})
    )
    home, repo = tmp_path / "home", tmp_path / "repo"
    home.mkdir()
    repo.mkdir()
    (repo / "helpers.py").write_text("def scale(x):\n    return x\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "i"]):
        subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t",
                        *args], check=True, capture_output=True)  # fmt: skip
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TCL_STATE_DIR", str(home / "state"))
    monkeypatch.delenv("TCL_CONFIG", raising=False)
    monkeypatch.delenv("TCL_DB_URL", raising=False)

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src.strip()) for src in CELLS]
    client = NotebookClient(nb, kernel_name="python3", timeout=240, startup_timeout=60,
                            resources={"metadata": {"path": str(repo)}})  # fmt: skip
    try:
        client.execute()  # raises CellExecutionError when a cell fails
        outputs = nb.cells[3].outputs
        text = "".join(o.get("text", "") for o in outputs)
        assert "remote says hi from run-" in text, outputs
        runs = json.loads(subprocess.run([TCL, "ps", "-a", "--json"], capture_output=True,
                                         text=True, check=True).stdout)  # fmt: skip
        (run,) = runs
        assert run["session"] == "remote" and run["state"] == "terminated", run  # closed
    finally:
        stop_local_shim(home / "state" / "local-shim")
