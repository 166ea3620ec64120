"""`tcl submit` from a user's uv project on the local default: the job runs in the project's
environment (built by the host from its uv.lock, the host's `uv_groups` and `--group` synced),
reused by the next submit; `--host-env` runs it in the host's. No network: the project's
packages are wheels it keeps (tests/uvproject.py)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from tests.integration.tclcli import run_tcl, stop_local_shim_and_tasks, user_env
from tests.uvproject import DEP, GROUP, GROUP_DEP, make_project


def test_a_submit_from_a_uv_project_runs_in_its_environment(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    repo = make_project(tmp_path / "repo")
    env = user_env(home, drop=("TCL_CONFIG", "TCL_DB_URL"))
    env.update({"UV_PYTHON_DOWNLOADS": "never", "UV_OFFLINE": "1"})
    try:
        first = run_tcl(["submit", "--group", GROUP, "--", "python", "job.py"], env, repo)
        assert f"{DEP} yes" in first.stdout and f"{GROUP_DEP} yes" in first.stdout, first
        assert "dep says from the project's lock" in first.stdout
        where = re.search(r"^python (\S+)$", first.stdout, re.M)
        assert where is not None, first.stdout
        # the host's environments live beside its code cache, in the local shim's state
        envs = Path(where.group(1)).parent
        assert envs.is_relative_to(home / "state" / "local-shim")
        assert re.search(r"project's environment with groups probes: \w+ \(built in", first.stdout)

        again = run_tcl(["submit", "--group", GROUP, "--", "python", "job.py"], env, repo)
        assert f"python {where.group(1)}" in again.stdout, again.stdout
        assert "(reused)" in again.stdout

        host = run_tcl(["submit", "--host-env", "--", "python", "job.py"], env, repo, check=False)
        assert host.returncode != 0 and f"{DEP} no" in host.stdout, host

        # a shell in a running job (`tcl ssh`) has the job's environment too
        long = ["submit", "-d", "--json", "--", "python", "-c", "import time; time.sleep(120)"]
        run_id = json.loads(run_tcl(long, env, repo).stdout)["run_id"]
        probe = ["ssh", run_id, "--", "python", "-c", "import sys, tclprobe_dep; print(sys.prefix)"]
        deadline = time.monotonic() + 60
        while (shell := run_tcl(probe, env, repo, check=False)).returncode != 0:
            assert time.monotonic() < deadline, shell
            time.sleep(0.5)
        assert Path(shell.stdout.strip()).parent == envs, shell.stdout
        run_tcl(["stop", run_id], env, repo)
    finally:
        stop_local_shim_and_tasks(home / "state" / "local-shim")
