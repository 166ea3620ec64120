"""@remote inside a real Jupyter kernel (nbclient + ipykernel): cells define the globals and the
function, call it remotely (a SubprocessSession worker), and assert what came back. Any cell
that raises fails the test."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[3]

CELLS = [
    """
import numpy as np, jax, jax.numpy as jnp, threading
from tcl.remote import decorator
from tcl.remote.decorator import remote
from tcl.remote.local import SubprocessSession
decorator.set_session_factory(lambda placement: SubprocessSession(env={"PYTHONHASHSEED": "777"}))
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

@remote(chip="cpu")
def step(n):
    global counter, created, params
    history.append(n)
    counter += n
    created = "new global"
    helper(n)
    params = params * 2
    print("remote says hi")
    return float(big[:2].sum()) + n
""",
    "result = step(3)",
    """
assert result == 5.0, result
assert history == [0, 3] and alias is history
assert counter == 4 and created == "new global"
assert config == {"lr": 0.1, "calls": 3}
assert isinstance(params, jax.Array) and params.tolist() == [2.0, 2.0, 2.0]
assert step.last_stats.bytes_received < 1024 * 1024, step.last_stats
assert step.last_stats.bytes_sent > 16 * 1024 * 1024
""",
    """
lock = threading.Lock()

@remote
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
@remote
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


@pytest.mark.timeout(240)
def test_remote_in_a_real_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A kernelspec for this very interpreter: "python" on PATH may be another one.
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "tcl test", "language": "python"})
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("PYTHONPATH", str(REPO))

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src.strip()) for src in CELLS]
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=120,
        startup_timeout=60,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError when a cell fails

    outputs = nb.cells[3].outputs
    assert any("remote says hi" in o.get("text", "") for o in outputs), outputs
