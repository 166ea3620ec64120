"""`tcl repl` and `tcl sync` on the local default (no config): real Jupyter Lab in a runner,
reached through the runner's forward, and live code sync into its working dir."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.replcli import start_repl
from tests.integration.tclcli import TclEnv, stop_local_shim_and_tasks


@dataclass
class LocalEnv(TclEnv):
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in super().env().items() if k not in ("TCL_CONFIG", "TCL_DB_URL")}
        return env


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t", *args],
        check=True,
        capture_output=True,
    )


def make_repo(repo: Path) -> None:
    repo.mkdir()
    _git(repo, "init", "-q")
    add_files(repo)


def add_files(repo: Path) -> None:
    """The files :func:`edit_every_kind` changes, committed."""
    (repo / "pkg").mkdir()
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "pkg" / "model.py").write_text("WIDTH = 1\n")
    (repo / "notes.txt").write_text("keep me\n")
    (repo / "old_name.py").write_text("RENAMED = True\n")
    (repo / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (repo / "gone.txt").write_text("delete me\n")
    (repo / ".gitignore").write_text("*.ckpt\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "init")


def edit_every_kind(repo: Path) -> None:
    """Edit, add, delete, rename, a binary file and a mode change."""
    (repo / "pkg" / "model.py").write_text("WIDTH = 2\n")
    (repo / "pkg" / "extra.py").write_text("NEW = 1\n")
    (repo / "gone.txt").unlink()
    (repo / "old_name.py").rename(repo / "new_name.py")
    (repo / "blob.bin").write_bytes(bytes(range(256)) * 64 + b"\x00\xff" * 1000)
    os.chmod(repo / "run.sh", 0o755)
    (repo / "weights.ckpt").write_text("ignored: never synced\n")


def tree(root: Path, skip: tuple[str, ...] = ()) -> dict[str, tuple[str, bool]]:
    """Every file under ``root``: sha256 and whether it is executable (what tcl ships of a
    mode; the runner keeps group and others out) (``skip``: top-level names)."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if rel.split("/")[0] in skip or not p.is_file():
            continue
        digest = hashlib.sha256(p.read_bytes()).hexdigest()
        out[rel] = (digest, bool(p.stat().st_mode & stat.S_IXUSR))
    return out


def shipped(repo: Path) -> dict[str, tuple[str, bool]]:
    """The local tree as tcl ships it (.git and ignored files left out)."""
    return {k: v for k, v in tree(repo, (".git",)).items() if not k.endswith(".ckpt")}


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LocalEnv]:
    home = tmp_path / "home"
    home.mkdir()
    env = LocalEnv(home, tmp_path / "unused.yaml", tmp_path / "repo")
    make_repo(env.repo)
    try:
        yield env
    finally:
        for r in json.loads(env.tcl("ps", "-a", "--json", check=False).stdout or "[]"):
            if r["state"] not in ("succeeded", "failed", "terminated"):
                env.tcl("stop", "--grace", "1", r["run_id"], check=False)
        stop_local_shim_and_tasks(home / "state" / "local-shim")


def _workdir(env: LocalEnv, run_id: str) -> Path:
    (work,) = (env.home / "state" / "local-shim" / "state" / "tasks").glob(
        f"{run_id}-*/runner/work"
    )
    return work


def test_repl_answers_through_the_forward_and_sync_applies_every_kind_of_change(
    local: LocalEnv,
) -> None:
    repl = start_repl(local)
    try:
        status, body = repl.get("/api/status")
        assert status == 200 and "started" in body, body
        assert repl.get("/api/status", token=False)[0] == 403  # Jupyter's own token guards it
        (row,) = json.loads(local.tcl("ps", "--json").stdout)
        run_id = row["run_id"]
        work = _workdir(local, run_id)
        assert tree(work, (".ipynb_checkpoints",)) == shipped(local.repo)

        edit_every_kind(local.repo)
        res = json.loads(local.tcl("sync", "--json").stdout)
        assert res["run_id"] == run_id and res["paths"] == 7, res  # a rename is 2
        assert res["modules"] == ["new_name", "pkg.extra", "pkg.model"]
        assert tree(work, (".ipynb_checkpoints",)) == shipped(local.repo)  # byte for byte
        assert json.loads(local.tcl("sync", "--json").stdout)["paths"] == 0

        # The remote tree changed under the next patch: refused, nothing half-applied.
        (work / "notes.txt").write_text("edited in the notebook\n")
        before = tree(work)
        (local.repo / "notes.txt").write_text("edited locally\n")
        (local.repo / "pkg" / "model.py").write_text("WIDTH = 3\n")
        res = local.tcl("sync", run_id, check=False)
        assert res.returncode != 0 and "notes.txt" in res.stderr, res.stderr
        assert "pkg/model.py" not in res.stderr.split("notes.txt")[0][-200:]
        assert tree(work) == before

        code, err = repl.interrupt()
        assert code == 0 and f"left running: tcl repl --attach {run_id}" in err, err
        again = start_repl(local, "--attach", run_id)
        assert again.get("/api/status")[0] == 200
        again.interrupt()
    finally:
        if repl.proc.poll() is None:
            repl.proc.kill()
