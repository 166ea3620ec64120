"""CLI through typer's CliRunner: parsing, one-line errors, stable JSON, kept logs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tcl.cli.main import app
from tcl.control.logcache import LogCache
from tcl.control.states import RunState
from tcl.control.store import Store
from tcl.runner.api import Event, EventKind, LogStream, RunnerState

runner = CliRunner()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("TCL_CONFIG", raising=False)
    monkeypatch.delenv("TCL_DB_URL", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    return tmp_path


def test_bad_config_is_one_line_with_key_and_line(home: Path) -> None:
    cfg = home / "c.yaml"
    cfg.write_text("hosts:\n  a:\n    type: ssh\n    ssh: x\n    prot: 22\n")
    res = runner.invoke(app, ["-c", str(cfg), "hosts"])
    assert res.exit_code == 2
    assert f"{cfg}:5: hosts.a.prot: unknown key" in res.stderr
    assert "Traceback" not in res.output


def test_hosts_json_default_is_local(home: Path) -> None:
    res = runner.invoke(app, ["hosts", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == [
        {"name": "local", "type": "local", "address": "this machine", "reachable": None,
         "detail": "", "accelerators": []}
    ]  # fmt: skip


def test_submit_usage_errors(home: Path) -> None:
    res = runner.invoke(app, ["submit", "--env", "NOEQUALS", "--", "true"])
    assert res.exit_code == 1 and "--env 'NOEQUALS': expected KEY=VALUE" in res.stderr
    res = runner.invoke(app, ["submit", "--secret", "TCL_TEST_UNSET_SECRET", "--", "true"])
    assert res.exit_code == 1 and "not set in this shell's environment" in res.stderr
    res = runner.invoke(app, ["submit", "--host", "nope", "--", "true"])
    assert res.exit_code == 1 and "no host named 'nope'" in res.stderr


def _seed_run(home: Path) -> str:
    store = Store(f"sqlite:///{home / 'state' / 'tcl.db'}")
    store.create_run("train-aaaaaa", "train", {"argv": ["python", "t.py"], "chips": 2,
                                               "chip": "h100"})  # fmt: skip
    store.set_state("train-aaaaaa", RunState.PROVISIONING)
    store.set_placement("train-aaaaaa", "gone-host", "ssh", "0" * 64)
    store.add_attempt("train-aaaaaa", "gone-host", "ssh", {"task_id": "t", "runner_port": 1})
    store.set_state("train-aaaaaa", RunState.RUNNING)
    store.set_state("train-aaaaaa", RunState.SUCCEEDED, exit_code=0)
    store.close()
    t0 = time.time() - 3600
    LogCache("train-aaaaaa", home / "state" / "logs").append([
        Event(seq=i + 1, ts=t0 + i * 60, kind=EventKind.LOG, stream=LogStream.STDOUT,
              data=f"line {i}\n")
        for i in range(5)
    ] + [Event(seq=6, ts=t0 + 400, kind=EventKind.STATE, state=RunnerState.SUCCEEDED,
               exit_code=0)])  # fmt: skip
    return "train-aaaaaa"


def test_logs_are_kept_after_the_host_is_gone(home: Path) -> None:
    (home / "state" / "logs").mkdir(parents=True)
    _seed_run(home)
    res = runner.invoke(app, ["logs", "train"])  # by name; the host is not even configured
    assert res.exit_code == 0, res.output
    assert res.stdout == "".join(f"line {i}\n" for i in range(5))
    res = runner.invoke(app, ["logs", "train-a", "--tail", "2", "--timestamps"])
    lines = res.stdout.splitlines()
    assert len(lines) == 2 and lines[1].endswith("Z line 4")
    res = runner.invoke(app, ["logs", "train", "--since", "58m"])
    assert res.stdout == "line 3\nline 4\n"
    res = runner.invoke(app, ["logs", "nope"])
    assert res.exit_code == 1 and "no run matches 'nope'" in res.stderr


def test_ps_json_is_stable(home: Path) -> None:
    (home / "state" / "logs").mkdir(parents=True)
    _seed_run(home)
    res = runner.invoke(app, ["ps", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout) == []  # finished runs need -a
    res = runner.invoke(app, ["ps", "-a", "--json"])
    (row,) = json.loads(res.stdout)
    assert set(row) == {
        "run_id",
        "name",
        "state",
        "host",
        "backend",
        "exit_code",
        "message",
        "argv",
        "job",
        "chip",
        "chips",
        "code_sha256",
        "created_at",
        "updated_at",
        "unreachable_since",  # null unless the host cannot be reached (display state)
    }
    assert row["state"] == "succeeded" and row["argv"] == ["python", "t.py"]
    assert row["job"] is None
    res = runner.invoke(app, ["ps", "-a"])
    assert "train-aaaaaa" in res.stdout and "succeeded" in res.stdout


def test_cloud_init_renders_valid_user_data(home: Path) -> None:
    res = runner.invoke(app, ["host", "cloud-init", "--fake-accelerators", "h100:8",
                              "--package", "tcl==0.1.0"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("#cloud-config\n")
    doc = yaml.safe_load(res.stdout)
    unit = doc["write_files"][0]["content"]
    assert "--fake-accelerators h100:8" in unit and "--host 127.0.0.1" in unit
    assert ["/var/lib/tcl-shim/venv/bin/pip", "install", "--quiet", "tcl==0.1.0"] in doc["runcmd"]
    assert "token" not in unit.split("--token-file")[0]  # only the path, never a value


def test_jobs_and_run_wire_tcl_jobs(home: Path) -> None:
    res = runner.invoke(app, ["jobs", "--json"])
    assert res.exit_code == 0, res.output
    keys = {j["key"] for j in json.loads(res.stdout)}
    assert {"gpt/train", "gpt/sample"} <= keys
    res = runner.invoke(app, ["run", "nope/job", "-", str(home / "out")])
    assert res.exit_code == 2 and "no job registered as 'nope/job'" in res.stderr
    yaml_path = Path(__file__).resolve().parents[3] / "examples" / "tiny_gpt.yaml"
    res = runner.invoke(app, ["run", "gpt/train", str(yaml_path), str(home / "out"),
                              "training/stepz=3"])  # fmt: skip
    assert res.exit_code == 2 and "training/stepz" in res.stderr


def test_a_cancelled_submit_prints_one_line(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tcl.control.errors import SubmitCancelled

    async def cancelled(*_args: object) -> None:
        raise SubmitCancelled("cancelled; nothing left on gpu1")

    monkeypatch.setattr("tcl.cli.submit.submit", cancelled)
    res = runner.invoke(app, ["submit", "--", "python", "x.py"])
    assert res.exit_code == 130
    assert res.stderr.strip() == "cancelled; nothing left on gpu1"
