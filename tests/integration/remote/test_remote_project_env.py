"""`@tcl.remote` from a uv project on the local default: the call server runs in the project's
environment (built from its uv.lock, tcl's package alone added to its path), so the function
imports there what the project has and tcl's environment lacks (issue 30)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.tclcli import stop_local_shim_and_tasks, user_env
from tests.uvproject import DEP, make_project

# what the user's notebook runs (here a script, with this checkout's tcl as the notebook's)
NOTEBOOK = """
import sys, tcl
from tcl.remote import decorator

@tcl.remote
def where():
    import sys, tclprobe_dep
    return sys.prefix, tclprobe_dep.HELLO

prefix, hello = where()
print("REMOTE", prefix, "|", hello, flush=True)
decorator.close_sessions()
"""


@pytest.mark.timeout(300)
def test_the_call_server_runs_in_the_project_s_environment(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    repo = make_project(tmp_path / "repo", remote=True)
    (repo / "notebook.py").write_text(NOTEBOOK)
    env = user_env(home, drop=("TCL_CONFIG", "TCL_DB_URL"))
    # the notebook's own tcl is this checkout's; the session's environment stays offline
    env.update({"UV_PYTHON_DOWNLOADS": "never", "UV_OFFLINE": "1"})
    try:
        res = subprocess.run(
            [sys.executable, "notebook.py"],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert res.returncode == 0, res.stdout + res.stderr
        line = next(ln for ln in res.stdout.splitlines() if ln.startswith("REMOTE "))
        prefix, hello = line.removeprefix("REMOTE ").split(" | ")
        assert hello == "from the project's lock"  # imported remotely: the project's package
        # the call server's python is the project's environment, under the local shim's state
        assert Path(prefix).is_relative_to(home / "state" / "local-shim"), prefix
        assert DEP not in sys.modules  # (and not this process's)
    finally:
        stop_local_shim_and_tasks(home / "state" / "local-shim")
