"""@remote inside a real Jupyter kernel (nbclient + ipykernel): cells define the globals and the
function, call it remotely (a SubprocessSession worker), and assert what came back. Any cell
that raises fails the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.notebook import cell_text, run_notebook, write_back_cells

SETUP = """
import numpy as np, jax, jax.numpy as jnp, threading
from tcl.remote import decorator
from tcl.remote.decorator import remote
from tcl.remote.local import SubprocessSession
decorator.set_session_factory(lambda placement: SubprocessSession(env={"PYTHONHASHSEED": "777"}))
"""


@pytest.mark.timeout(240)
def test_remote_in_a_real_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cells = [SETUP, *write_back_cells('remote(chip="cpu")'), "decorator.close_sessions()"]
    nb = run_notebook(cells, tmp_path, monkeypatch, tmp_path)
    assert "remote says hi" in cell_text(nb, 3), nb.cells[3].outputs
