"""Finding a user's jobs: `[tool.tcl] jobs` in the repo's pyproject.toml (modules imported from
the project root) and the `tcl.jobs` entry-point group; import errors keep their traceback."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tcl.jobs import discovery
from tcl.jobs.errors import ConfigError, JobModuleError, RegistryError
from tcl.jobs.registry import JOBS, get_job, list_jobs

JOB_MODULE = """\
import dataclasses

from tcl.jobs.config import field
from tcl.jobs.job import BasicJob
from tcl.jobs.registry import job


@dataclasses.dataclass
class Cfg:
    n: int = field("hello/n", default=1)


@job("{key}")
class Hello(BasicJob[Cfg]):
    \"\"\"Says hello.\"\"\"

    @classmethod
    def config(cls):
        return [Cfg]

    def run(self):
        pass
"""


def _repo(root: Path, modules: dict[str, str], declared: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    listed = ", ".join(f'"{m}"' for m in declared)
    text = f"[project]\nname = 'x'\n\n[tool.tcl]\njobs = [{listed}]\n"
    (root / "pyproject.toml").write_text(text)
    for name, text in modules.items():
        path = root / (name.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.parents:
            if parent == root:
                break
            (parent / "__init__.py").touch()
        path.write_text(text)
    return root


@pytest.fixture(autouse=True)
def _forget(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test sees only the jobs it declares (registry, loaded roots and sys.path restored)."""
    monkeypatch.setattr(discovery, "_LOADED", set())
    monkeypatch.setattr(sys, "path", list(sys.path))
    saved = dict(JOBS)
    yield
    JOBS.clear()
    JOBS.update(saved)


def test_pyproject_declared_modules_are_imported_from_the_project_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _repo(
        tmp_path / "repo",
        {"pkg_decl.jobs": JOB_MODULE.format(key="decl/hello")},
        ["pkg_decl.jobs"],
    )
    (repo / ".git").mkdir()
    (repo / "sub" / "deeper").mkdir(parents=True)
    monkeypatch.chdir(repo / "sub" / "deeper")  # found from anywhere below the project root
    assert get_job("decl/hello").__module__ == "pkg_decl.jobs"
    listing = {j.key: j for j in list_jobs()}
    assert listing["decl/hello"].doc == "Says hello."
    assert "gpt/train" in listing  # the built-ins are still there


def test_the_walk_stops_at_the_git_root_and_at_a_bound(tmp_path: Path) -> None:
    outer = _repo(tmp_path, {}, ["not.this"])
    inner = tmp_path / "inner"
    (inner / ".git").mkdir(parents=True)
    assert discovery.find_project(inner) is None  # a git root: the walk stops there
    (tmp_path / "plain" / "a").mkdir(parents=True)
    assert discovery.find_project(tmp_path / "plain" / "a", stop=tmp_path / "plain") is None
    assert discovery.find_project(tmp_path / "plain" / "a") == outer / "pyproject.toml"


def test_an_unknown_key_names_the_declared_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _repo(
        tmp_path / "r", {"pkg_known.jobs": JOB_MODULE.format(key="known/job")}, ["pkg_known.jobs"]
    )
    monkeypatch.chdir(repo)
    with pytest.raises(RegistryError, match=r"no job registered as 'known/jb'.*known/job"):
        get_job("known/jb")


def test_an_import_error_is_shown_with_its_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = "import os\n\n\ndef helper():\n    return 1\n\n\nraise RuntimeError('boom')\n"
    repo = _repo(tmp_path / "r", {"pkg_broken.jobs": broken}, ["pkg_broken.jobs"])
    monkeypatch.chdir(repo)
    with pytest.raises(JobModuleError) as e:
        get_job("anything")
    text = str(e.value)
    assert "pkg_broken.jobs" in text and str(repo / "pyproject.toml") in text
    assert "Traceback" in text and "RuntimeError: boom" in text
    assert 'pkg_broken/jobs.py", line 8' in text


def test_tcl_jobs_and_tcl_run_show_the_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from tcl.cli.app import app

    broken = "VALUE = 1\n\n\ndef f():\n    return VALUE / 0\n\n\nf()\n"
    repo = _repo(tmp_path / "r", {"pkg_cli_broken.jobs": broken}, ["pkg_cli_broken.jobs"])
    monkeypatch.chdir(repo)
    monkeypatch.setenv("NO_COLOR", "1")
    for args in (["jobs"], ["run", "x/y", "-", str(tmp_path / "out")]):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, res.output
        assert "cannot import job module 'pkg_cli_broken.jobs'" in res.stderr
        assert 'pkg_cli_broken/jobs.py", line 5, in f' in res.stderr
        assert "ZeroDivisionError" in res.stderr


def test_a_module_that_is_not_there_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = _repo(tmp_path / "r", {}, ["pkg_missing.jobs"])
    monkeypatch.chdir(repo)
    with pytest.raises(JobModuleError, match="pkg_missing"):
        list_jobs()


def test_a_malformed_declaration_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.tcl]\njobs = 'one.module'\n")
    with pytest.raises(ConfigError, match=r"tool\.tcl\.jobs.*list of module names"):
        discovery.declared_modules(tmp_path / "pyproject.toml")
    (tmp_path / "pyproject.toml").write_text("[tool.tcl\n")
    with pytest.raises(ConfigError, match=r"pyproject\.toml"):
        discovery.declared_modules(tmp_path / "pyproject.toml")


def test_entry_points_in_the_tcl_jobs_group_are_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    (site / "pkg_ep").mkdir(parents=True)
    (site / "pkg_ep" / "__init__.py").write_text(JOB_MODULE.format(key="ep/hello"))
    dist = site / "pkg_ep-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg-ep\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent(
            """\
            [tcl.jobs]
            hello = pkg_ep
            """
        )
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.chdir(tmp_path)
    assert get_job("ep/hello").__module__ == "pkg_ep"
