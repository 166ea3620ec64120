"""JAX on this shared 2-core box: CPU only, one thread per op."""

from __future__ import annotations

import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault(
    "XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
)

from pathlib import Path

import pytest

from .helpers import write_tiny


@pytest.fixture(scope="session")
def straight(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, object]:
    """A tiny gpt/train run, 40 steps straight through, checkpoints at 20 and 40."""
    from tcl.jobs.run import run_job

    out = tmp_path_factory.mktemp("straight")
    config = write_tiny(out)
    job = run_job("gpt/train", config, out, name="straight")
    return out, config, job


USER_REPO = Path(__file__).resolve().parents[2] / "fixtures" / "userrepo"


@pytest.fixture(scope="session")
def user_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the user-repo fixture (its package `myjobs` lives outside tcl and is found only
    through its pyproject's `[tool.tcl] jobs`). One copy per session: its modules are imported
    once into this process."""
    import shutil

    dest = tmp_path_factory.mktemp("userrepo") / "repo"
    shutil.copytree(USER_REPO, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest
