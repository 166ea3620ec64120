"""The notebook kernel of a project environment (tcl.runner.projectkernel): its kernel spec, and
the links that lend it ipykernel and what ipykernel needs, nothing else of tcl's environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tcl.runner.lend import distributions_needed
from tcl.runner.projectkernel import KERNEL_NAME, kernel_env


def test_the_lent_distributions_are_ipykernel_s_closure_only() -> None:
    names = {
        d.metadata["Name"].lower().replace("_", "-") for d in distributions_needed(["ipykernel"])
    }
    assert {"ipykernel", "pyzmq", "jupyter-client", "traitlets", "tornado", "ipython"} <= names
    # tcl's own and the jobs' packages are not lent: the notebook imports the project's
    assert not names & {
        "jax",
        "numpy",
        "flax",
        "sqlalchemy",
        "pydantic",
        "tcl-submit",
        "jupyterlab",
    }


def test_the_kernel_spec_names_the_project_python_and_comes_first(tmp_path: Path) -> None:
    python = tmp_path / "envs" / "abc" / "bin" / "python"
    added = kernel_env(tmp_path / "runner", python, {"JUPYTER_PATH": "/theirs"})
    assert added == {"JUPYTER_PATH": f"{tmp_path / 'runner' / 'jupyter'}:/theirs"}
    spec = json.loads(
        (tmp_path / "runner/jupyter/kernels" / KERNEL_NAME / "kernel.json").read_text()
    )
    assert spec["argv"][:2] == [str(python), "-c"] and spec["argv"][3:] == [
        "-f",
        "{connection_file}",
    ]
    links = tmp_path / "runner" / "kernel-import"
    assert (links / "ipykernel").is_dir() and (links / "zmq").is_dir()
    assert not (links / "jax").exists() and not (links / "tcl").exists()
    # made twice (a second session of the runner): the same, no error
    assert kernel_env(tmp_path / "runner", python, {}) == {
        "JUPYTER_PATH": str(tmp_path / "runner/jupyter")
    }


def test_a_python_without_ipykernel_says_what_to_add(tmp_path: Path) -> None:
    kernel_env(tmp_path, Path(sys.executable), {})
    spec = json.loads((tmp_path / "jupyter/kernels" / KERNEL_NAME / "kernel.json").read_text())
    code = spec["argv"][2].replace(str(tmp_path / "kernel-import"), str(tmp_path / "none"))
    # -S: no site-packages, as a project environment without ipykernel (and no links found)
    res = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 1
    assert "has no ipykernel" in res.stderr and "uv add --dev ipykernel" in res.stderr, res.stderr
