"""`tcl submit --job` with a job from the user's own repo (tests/fixtures/userrepo, declared in
its pyproject.toml), on the local default: checked before shipping, found by the launcher in the
shipped tree on the host side, and started again from a checkpoint with `--restore` written
as seed 001 writes it (without the launcher's run-id folder)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.integration.tclcli import stop_local_shim_and_tasks

from .test_e2e_local import _local_env, _tcl

USER_REPO = Path(__file__).resolve().parents[2] / "fixtures" / "userrepo"


def test_submit_a_job_of_the_users_repo_then_restore_it(tmp_path: Path) -> None:
    home, work, out = tmp_path / "home", tmp_path / "work", tmp_path / "out"
    home.mkdir()
    shutil.copytree(USER_REPO, work, ignore=shutil.ignore_patterns("__pycache__"))
    env = _local_env(home)
    job = ["--job", "custom/my_job_fixed", "--env", f"TCL_OUT_DIR={out}"]
    try:
        res = _tcl(env, work, "submit", "--name", "mine", *job, timeout_s=300)
        assert res.returncode == 0, res.stdout + res.stderr
        [first] = json.loads(_tcl(env, work, "ps", "-a", "--json").stdout)
        assert first["state"] == "succeeded" and first["job"] == "custom/my_job_fixed"
        saved = out / "checkpoints" / "default" / "default" / "mine" / first["run_id"]
        assert (saved / "latest").read_text().strip() == "step/9000"

        res = _tcl(
            env,
            work,
            "submit",
            "--name",
            "again",
            *job,
            "--restore",
            "default/default/mine/step/9000",
            timeout_s=300,
        )
        assert res.returncode == 0, res.stdout + res.stderr
        logs = res.stdout + res.stderr
        assert f"from default/default/mine/{first['run_id']}/step/9000" in logs

        bad = _tcl(env, work, "submit", "--job", "custom/my_jb", timeout_s=300)
        assert bad.returncode != 0 and "did you mean custom/my_job" in bad.stderr
    finally:
        stop_local_shim_and_tasks(home / "state" / "local-shim")
