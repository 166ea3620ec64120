"""No config at all: `tcl submit` runs on the local default (an embedded shim, process executor)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from tests.integration.tclcli import run_tcl, start_tcl, stop_local_shim_and_tasks, user_env


def _local_env(home: Path) -> dict[str, str]:
    """No config, no team database: the local default, with state under ``home``."""
    return user_env(home, drop=("TCL_CONFIG", "TCL_DB_URL"))


def _tcl(
    env: dict[str, str], cwd: Path, *args: str, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    return run_tcl(args, env, cwd, check=False, timeout=timeout_s)


def test_no_config_runs_on_local_default(tmp_path: Path) -> None:
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "hello.py").write_text("print('hello', 6 * 7)\n")
    env = _local_env(home)
    try:
        res = _tcl(env, work, "submit", "--", "python", "-c", "print(1)")
        assert res.returncode == 0, res.stderr
        assert res.stdout == "1\n"
        assert "started on local" in res.stderr and "tcl logs -f" in res.stderr
        res = _tcl(env, work, "submit", "--", "python", "hello.py")
        assert res.stdout == "hello 42\n", res.stderr
        res = _tcl(env, work, "submit", "--", "python", "-c", "raise SystemExit(4)")
        assert res.returncode == 4 and "failed (exit code 4)" in res.stderr
        # `tcl ssh` here: a shell in the job's dir with its env, never its secrets (issue 31)
        waits = "import os, time\nwhile not os.path.exists('go'): time.sleep(0.05)"
        env["S"] = "s3cret-value"
        detached = ["submit", "-d", "--json", "--env", "FOO=bar", "--secret", "S", "--"]
        res = _tcl(env, work, *detached, "python", "-c", waits)
        run_id = json.loads(res.stdout)["run_id"]
        probe = 'echo "$FOO" "$(pwd)" "${S:-no-secret}"'
        del env["S"]  # the shell starts from this one's env: the job's secret is not added
        res = _tcl(env, work, "ssh", run_id, "--", "sh", "-c", probe)
        assert res.returncode == 0, res.stderr
        foo, cwd, secret = res.stdout.split()
        assert (foo, secret) == ("bar", "no-secret") and (Path(cwd) / "hello.py").exists()
        assert _tcl(env, work, "ssh", run_id, "--", "touch", "go").returncode == 0
        res = _tcl(env, work, "logs", "-f", run_id)
        assert res.returncode == 0, res.stderr
    finally:
        stop_local_shim_and_tasks(home / "state" / "local-shim")


def test_ctrl_c_detaches_and_the_job_keeps_running(tmp_path: Path) -> None:
    env = _local_env(tmp_path)
    work = tmp_path / "work"  # not $HOME itself: outside git, tcl refuses to ship all of ~
    work.mkdir()

    def tcl(*args: str) -> subprocess.CompletedProcess[str]:
        return _tcl(env, work, *args)

    try:
        job = "import time\nprint('tick', flush=True)\ntime.sleep(60)"
        sub = json.loads(tcl("submit", "-d", "--json", "--", "python", "-c", job).stdout)
        follow = start_tcl(["logs", "-f", sub["run_id"]], env, work)
        # its first line came through: it follows (its Ctrl-C handler is in place)
        assert follow.stdout is not None and follow.stdout.readline() == "tick\n"
        follow.send_signal(signal.SIGINT)
        _, err = follow.communicate(timeout=30)
        assert follow.returncode == 130
        assert f"detached; the job keeps running. Re-attach: tcl logs -f {sub['run_id']}" in err
        (row,) = json.loads(tcl("ps", "--json").stdout)
        assert row["run_id"] == sub["run_id"] and row["state"] == "running"
        assert "terminated" in tcl("stop", "--grace", "1", sub["run_id"]).stderr
        (row,) = json.loads(tcl("ps", "-a", "--json").stdout)
        assert row["state"] == "terminated"
    finally:
        stop_local_shim_and_tasks(tmp_path / "state" / "local-shim")


def test_submit_a_tcl_jobs_job_by_key_on_the_local_default(tmp_path: Path) -> None:
    """`tcl submit --job KEY --job-config FILE`: the config travels in the spec as data and the
    runner starts the tcl.jobs launcher, which trains (real JAX on CPU) and checkpoints."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    repo = Path(__file__).resolve().parents[3]
    config = (repo / "examples" / "tiny_gpt.yaml").read_text()
    (work / "tiny.yaml").write_text(
        config.replace("total_steps: 600", "total_steps: 30").replace(
            "report_interval: 25", "report_interval: 10"
        )
    )
    env = _local_env(home)

    def tcl(*args: str) -> subprocess.CompletedProcess[str]:
        return _tcl(env, work, *args, timeout_s=300)

    try:
        res = tcl("submit", "--name", "gpt", "--job", "gpt/train", "--job-config", "tiny.yaml")
        assert res.returncode == 0, res.stderr
        steps = [ln for ln in (res.stdout + res.stderr).splitlines() if "train step" in ln]
        assert [ln.split("train step ")[1].split()[0] for ln in steps] == ["10", "20", "30"]
        ps = tcl("ps", "-a", "--json")
        [run] = json.loads(ps.stdout)
        assert run["job"] == "gpt/train" and run["argv"] == [] and run["state"] == "succeeded"
        # its metrics travelled as TCL_METRIC lines: points of `tcl metrics`, not log lines
        assert "TCL_METRIC" not in res.stdout + res.stderr
        points = json.loads(tcl("metrics", run["run_id"], "--json").stdout)
        train = [p for p in points if p["kind"] == "train"]
        assert [p["step"] for p in train] == [10, 20, 30]
        assert all(p["values"]["loss"] > 0 and "lr" in p["values"] for p in train)
        bad = tcl("submit", "--job", "gpt/train", "--", "python", "-c", "1")
        assert bad.returncode != 0 and "not both" in bad.stderr
    finally:
        stop_local_shim_and_tasks(home / "state" / "local-shim")


def test_the_job_starts_in_the_directory_submitted_from(tmp_path: Path) -> None:
    """`cd repo/sub && tcl submit -- python3 inner.py`: the job runs in sub, not the repo root."""
    home, repo = tmp_path / "home", tmp_path / "repo"
    home.mkdir()
    (repo / "sub").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "sub" / "inner.py").write_text(
        "import os\nprint('from', os.path.basename(os.getcwd()))\n"
    )
    env = _local_env(home)
    try:
        res = _tcl(env, repo / "sub", "submit", "--", "python3", "inner.py")
        assert res.returncode == 0, res.stderr
        assert res.stdout == "from sub\n"
        assert "not in a git repository" not in res.stderr
    finally:
        stop_local_shim_and_tasks(home / "state" / "local-shim")


def test_a_run_whose_host_left_the_config_can_still_be_stopped(tmp_path: Path) -> None:
    """The attempt keeps how its host was reached: stop works once `local` is gone."""
    env = _local_env(tmp_path)
    work = tmp_path / "work"  # not $HOME itself: outside git, tcl refuses to ship all of ~
    work.mkdir()
    try:
        job = "import time\nprint('tick', flush=True)\ntime.sleep(60)"
        sub = json.loads(
            _tcl(env, work, "submit", "-d", "--json", "--", "python", "-c", job).stdout
        )
        cfg = tmp_path / "other.yaml"
        cfg.write_text("hosts:\n  elsewhere: {type: local}\n")
        env_other = {**env, "TCL_CONFIG": str(cfg)}
        (row,) = json.loads(_tcl(env_other, tmp_path, "ps", "--json").stdout)
        assert row["state"] == "running" and row["unreachable_since"] is None
        res = _tcl(env_other, tmp_path, "stop", "--grace", "1", sub["run_id"])
        assert res.returncode == 0 and "terminated" in res.stderr, res.stderr
        (row,) = json.loads(_tcl(env_other, tmp_path, "ps", "-a", "--json").stdout)
        assert row["state"] == "terminated"
    finally:
        stop_local_shim_and_tasks(tmp_path / "state" / "local-shim")
