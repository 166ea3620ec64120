"""`tcl repl` from a user's uv project on the local default: the notebook's kernel runs in the
project's environment (its lock's packages import, tcl's own do not), though the project lists
no ipykernel. No network: the project's packages are wheels it keeps (tests/uvproject.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.replcli import start_repl
from tests.integration.tclcli import TclEnv, stop_local_shim_and_tasks
from tests.uvproject import DEP, make_project

CELL = """\
import importlib.util, sys, tclprobe_dep
print(sys.prefix)
print(tclprobe_dep.HELLO)
print("jax" if importlib.util.find_spec("jax") else "no jax")
"""


class ProjectEnv(TclEnv):
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in super().env().items() if k not in ("TCL_CONFIG", "TCL_DB_URL")}
        return {**env, "UV_PYTHON_DOWNLOADS": "never", "UV_OFFLINE": "1"}


def test_the_notebook_kernel_runs_in_the_project_environment(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = ProjectEnv(home, tmp_path / "unused.yaml", make_project(tmp_path / "repo"))
    repl = start_repl(env)
    try:
        prefix, hello, jax = repl.execute(CELL).splitlines()
        # the project's environment, built by the host beside its code cache
        assert Path(prefix).is_relative_to(home / "state" / "local-shim"), prefix
        assert Path(prefix).parent.name == "envs", prefix
        assert hello == "from the project's lock", DEP
        # the project lists no ipykernel: the kernel's comes from tcl's environment, and
        # nothing else of it (tcl's has jax; the project does not)
        assert jax == "no jax"
        code, err = repl.interrupt()
        assert code == 0, err
    finally:
        if repl.proc.poll() is None:
            repl.proc.kill()
        for r in json.loads(env.tcl("ps", "-a", "--json", check=False).stdout or "[]"):
            if r["state"] not in ("succeeded", "failed", "terminated"):
                env.tcl("stop", "--grace", "1", r["run_id"], check=False)
        stop_local_shim_and_tasks(home / "state" / "local-shim")
