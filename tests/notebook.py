"""Run cells in a real Jupyter kernel (nbclient + ipykernel of this very interpreter)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

REPO = Path(__file__).resolve().parents[1]


def run_notebook(
    cells: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cwd: Path,
    timeout_s: int = 120,
) -> nbformat.NotebookNode:
    """Execute ``cells`` in order in ``cwd``; a cell that raises fails the test
    (``CellExecutionError``). The kernel inherits this process's environment."""
    # A kernelspec for this very interpreter: "python3" on PATH may be another one.
    spec = tmp_path / "jupyter" / "kernels" / "python3"
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "tcl test", "language": "python"})
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    nb: nbformat.NotebookNode = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src.strip()) for src in cells]
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=timeout_s,
        startup_timeout=60,
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()
    return nb


def cell_text(nb: nbformat.NotebookNode, index: int) -> str:
    """What cell ``index`` printed (its stream outputs)."""
    return "".join(o.get("text", "") for o in nb.cells[index].outputs)


def write_back_cells(deco: str) -> list[str]:
    """The issue's write-back scenario as notebook cells, with ``@{deco}`` as the decorator
    (imports in the caller's first cell: numpy as np, jax, jax.numpy as jnp, threading)."""
    return [
        """
history = [0]
alias = history
counter = 1
config = {"lr": 0.1}
big = np.ones(4 * 1024 * 1024, dtype=np.float32)  # 16 MiB, only read
params = jnp.ones(3)
""",
        f"""
def helper(n):
    config["calls"] = n

@{deco}
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
assert step.last_stats.bytes_received < 1024 * 1024, step.last_stats  # big not sent back
assert step.last_stats.bytes_sent > 16 * 1024 * 1024
assert step(1) == 3.0 and history == [0, 3, 1] and counter == 5 and alias is history
""",
        f"""
lock = threading.Lock()

@{deco}
def locked():
    with lock:
        return 1

try:
    locked()
except Exception as e:
    err = e
assert type(err).__name__ == "UnpicklableError" and "global 'lock' (_thread.lock)" in str(err), err
""",
        f"""
@{deco}
def boom():
    x = 0
    return 1 / x  # remote boom line

try:
    boom()
except ZeroDivisionError as e:
    remote_tb = str(e.__cause__)
assert "return 1 / x  # remote boom line" in remote_tb, remote_tb
""",
    ]
