"""`--restore` paths: the launcher's run-id folder does not surprise one written as seed 001
does (project/group/name/suffix), and `tcl checkpoints` lists the exact paths to give."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tcl.cli.app import app
from tcl.jobs.errors import CheckpointError
from tcl.jobs.layout import resolve_restore

cli = CliRunner()


def _ckpt(root: Path, rel: str, steps: int, key: str = "gpt/train") -> None:
    d = root / "checkpoints" / rel
    (d / "checkpoint").mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"steps": steps}))
    parts = rel.split("/")
    (d / "job.json").write_text(json.dumps({"name": parts[2], "job": key}))
    (d / "config.yaml").write_text("job: " + key + "\n")


def _latest(root: Path, scope: str, suffix: str) -> None:
    (root / "checkpoints" / scope / "latest").write_text(suffix + "\n")


@pytest.fixture
def out(tmp_path: Path) -> Path:
    _ckpt(tmp_path, "p/g/train/run-a/step_00000020", 20)
    _ckpt(tmp_path, "p/g/train/run-a/step_00000040", 40)
    _latest(tmp_path, "p/g/train/run-a", "step_00000040")
    _ckpt(tmp_path, "p/g/local/step_00000010", 10)  # `tcl run`: no run-id folder
    _ckpt(tmp_path, "p/g/two/run-1/best", 5)
    _ckpt(tmp_path, "p/g/two/run-2/best", 6)
    return tmp_path


def test_exact_paths_resolve_to_themselves(out: Path) -> None:
    ckpts = out / "checkpoints"
    exact = "p/g/train/run-a/step_00000020"
    assert resolve_restore(ckpts, exact) == exact
    assert resolve_restore(ckpts, "p/g/local/step_00000010") == "p/g/local/step_00000010"


def test_a_seed_style_path_finds_the_one_run_holding_it(out: Path) -> None:
    ckpts = out / "checkpoints"
    assert resolve_restore(ckpts, "p/g/train/step_00000020") == "p/g/train/run-a/step_00000020"


def test_a_run_or_a_name_means_its_latest(out: Path) -> None:
    ckpts = out / "checkpoints"
    assert resolve_restore(ckpts, "p/g/train/run-a") == "p/g/train/run-a/step_00000040"
    assert resolve_restore(ckpts, "p/g/train") == "p/g/train/run-a/step_00000040"


def test_an_ambiguous_or_missing_path_lists_what_is_there(out: Path) -> None:
    ckpts = out / "checkpoints"
    with pytest.raises(CheckpointError, match=r"p/g/two/run-1/best.*p/g/two/run-2/best"):
        resolve_restore(ckpts, "p/g/two/best")
    with pytest.raises(CheckpointError, match=r"no checkpoint at p/g/train/step_9.*step_00000040"):
        resolve_restore(ckpts, "p/g/train/step_9")
    with pytest.raises(CheckpointError, match="tcl checkpoints"):
        resolve_restore(ckpts, "nothing/here")


def test_tcl_checkpoints_lists_restore_paths(out: Path) -> None:
    res = cli.invoke(app, ["checkpoints", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [r["restore"] for r in rows] == [
        "p/g/local/step_00000010",
        "p/g/train/run-a/step_00000020",
        "p/g/train/run-a/step_00000040",
        "p/g/two/run-1/best",
        "p/g/two/run-2/best",
    ]
    latest = {r["restore"]: r["latest"] for r in rows}
    assert latest["p/g/train/run-a/step_00000040"] and not latest["p/g/train/run-a/step_00000020"]
    assert rows[1]["step"] == 20 and rows[1]["job"] == "gpt/train"

    res = cli.invoke(app, ["checkpoints", "run-a", "--out", str(out), "--json"])
    assert [r["restore"] for r in json.loads(res.stdout)] == [
        "p/g/train/run-a/step_00000020",
        "p/g/train/run-a/step_00000040",
    ]
    res = cli.invoke(app, ["checkpoints", "--out", str(out)])
    assert res.exit_code == 0 and "p/g/train/run-a/step_00000040" in res.stdout
    # None is an answer, not an error (issue 31): exit 0, a word on stderr, [] as JSON.
    res = cli.invoke(app, ["checkpoints", "nope", "--out", str(out)])
    assert res.exit_code == 0 and "no checkpoints of 'nope'" in res.stderr and res.stdout == ""
    res = cli.invoke(app, ["checkpoints", "nope", "--out", str(out), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout) == []
