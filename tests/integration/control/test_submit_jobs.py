"""`tcl submit --job KEY [--restore PATH]`: the key is checked against the jobs the user's repo
declares before anything ships, and the restore path travels in the job spec. Each check is a
real ``python -m tcl.jobs.check`` child importing JAX and the project's job modules."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tcl.cli.app import app
from tcl.control.config import parse_config
from tcl.control.errors import TclError
from tcl.control.lifecycle.submit import Submission, submit
from tcl.control.paths import cache_dir
from tcl.control.service import Control
from tcl.control.store import Store
from tcl.runner.api import JobRef
from tests.unit.control.test_follow import FakeBackend, FakeRunner, use_hosts
from tests.unit.control.test_submit import Shim

USER_REPO = Path(__file__).resolve().parents[2] / "fixtures" / "userrepo"
CFG = parse_config("hosts:\n  racy: {type: local}\n")


class SpecRunner(FakeRunner):
    async def submit(self, spec: Any) -> None:
        self.spec = spec


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path / "state"))
    dest = tmp_path / "repo"
    shutil.copytree(USER_REPO, dest, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(dest)
    return dest


def _ctl(tmp_path: Path, runner: FakeRunner, monkeypatch: pytest.MonkeyPatch) -> Control:
    ctl = Control(CFG, Store(f"sqlite:///{tmp_path / 'tcl.db'}"))
    use_hosts(monkeypatch, racy=FakeBackend(runner, Shim(racy=False)))  # type: ignore[arg-type]
    return ctl


async def test_a_job_the_repo_declares_ships_with_its_restore_path(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = SpecRunner(None)
    ctl = _ctl(tmp_path, runner, monkeypatch)
    ref = JobRef(key="custom/my_job", restore="default/default/custom-my_job/r1/step/7500")
    await submit(ctl, Submission(argv=[], host="racy", job=ref))
    assert runner.spec.job == ref


async def test_an_unknown_key_is_refused_naming_the_repos_jobs(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctl = _ctl(tmp_path, FakeRunner(None), monkeypatch)
    expected = r"no job registered as 'custom/my_jb'; did you mean custom/my_job"
    with pytest.raises(TclError, match=expected):
        await submit(ctl, Submission(argv=[], host="racy", job=JobRef(key="custom/my_jb")))
    assert ctl.store.list_runs() == []


async def test_an_import_error_in_the_users_job_module_is_shown(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (repo / "myjobs" / "custom.py").write_text("import no_such_module_anywhere\n")
    ctl = _ctl(tmp_path, FakeRunner(None), monkeypatch)
    with pytest.raises(TclError) as e:
        await submit(ctl, Submission(argv=[], host="racy", job=JobRef(key="custom/my_job")))
    text = str(e.value)
    assert "myjobs.custom" in text and "Traceback" in text
    assert "No module named 'no_such_module_anywhere'" in text
    assert ctl.store.list_runs() == []


def test_cli_submit_checks_the_key_and_passes_restore_into_the_job_ref(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tcl.control.lifecycle.submit

    seen: list[Submission] = []

    async def fake_submit(ctl: Any, sub: Submission, obs: Any, check_job: bool = True) -> Any:
        seen.append(sub)
        raise TclError("stop here")

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TCL_SERVE", "0")  # the in-process submit, replaced here
    monkeypatch.delenv("TCL_CONFIG", raising=False)
    monkeypatch.setattr(tcl.control.lifecycle.submit, "submit", fake_submit)
    cli = CliRunner()
    args = ["submit", "--job", "custom/my_job", "--restore", "p/g/n/step/7500"]
    res = cli.invoke(app, args)
    assert res.exit_code != 0 and "stop here" in res.stderr
    [sub] = seen
    assert sub.job == JobRef(key="custom/my_job", restore="p/g/n/step/7500")
    res = cli.invoke(app, ["submit", "--job", "custom/my_jb"])  # checked in this environment
    assert res.exit_code == 1 and "did you mean custom/my_job" in res.stderr
    assert len(seen) == 1
    res = cli.invoke(app, ["submit", "--restore", "p/g/n/step/7500", "--", "true"])
    assert res.exit_code == 1 and "--restore needs --job KEY" in res.stderr
    # --job-config alone: its `job:` names the job (issue 31); a mismatch or none is refused
    named = tmp_path / "named.yaml"
    named.write_text("job: custom/my_job\ntraining: {total_steps: 3}\n")
    res = cli.invoke(app, ["submit", "--job-config", str(named)])
    assert res.exit_code != 0 and "stop here" in res.stderr, res.output
    assert seen[-1].job == JobRef(key="custom/my_job", config_yaml=named.read_text())
    res = cli.invoke(app, ["submit", "--job", "gpt/train", "--job-config", str(named)])
    assert res.exit_code == 1
    assert f"--job gpt/train but --job-config {named} names job: custom/my_job" in res.stderr
    unnamed = tmp_path / "unnamed.yaml"
    unnamed.write_text("training: {total_steps: 3}\n")
    res = cli.invoke(app, ["submit", "--job-config", str(unnamed)])
    assert res.exit_code == 1 and "names no `job:`: give --job KEY" in res.stderr


async def test_an_unknown_job_key_is_refused_before_anything_ships(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "job.py").write_text("print(1)\n")
    monkeypatch.chdir(tmp_path / "code")
    ctl = _ctl(tmp_path, FakeRunner(None), monkeypatch)
    with pytest.raises(TclError, match=r"no job registered as 'gpt/trian'; did you mean gpt/train"):
        await submit(ctl, Submission(argv=[], host="racy", job=JobRef(key="gpt/trian")))
    assert ctl.store.list_runs() == []  # no run recorded, no snapshot made
    assert not (cache_dir() / "index").exists()
