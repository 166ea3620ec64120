"""No config at all: `tcl submit` runs on the local default (an embedded shim, process executor)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tcl.control.localshim import stop_local_shim

TCL = str(Path(sys.executable).parent / "tcl")


def test_no_config_runs_on_local_default(tmp_path: Path) -> None:
    home = tmp_path / "home"
    work = tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (work / "hello.py").write_text("print('hello', 6 * 7)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TCL_CONFIG", "TCL_DB_URL")}
    env.update(HOME=str(home), TCL_STATE_DIR=str(home / "state"), NO_COLOR="1")
    try:
        res = subprocess.run(
            [TCL, "submit", "--", "python", "-c", "print(1)"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert res.returncode == 0, res.stderr
        assert res.stdout == "1\n"
        assert "started on local" in res.stderr and "tcl logs -f" in res.stderr
        res = subprocess.run(
            [TCL, "submit", "--", "python", "hello.py"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert res.stdout == "hello 42\n", res.stderr
        res = subprocess.run(
            [TCL, "submit", "--", "python", "-c", "raise SystemExit(4)"],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert res.returncode == 4 and "failed (exit code 4)" in res.stderr
    finally:
        stop_local_shim(home / "state" / "local-shim")
