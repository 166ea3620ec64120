"""Issue 26: tcl's state is the user's alone. A real local job end to end (the embedded shim, the
`tcl serve` daemon, the log cache, a metric point, the code cache), under a umask of 022, in a
state dir and a code cache dir that already exist 0755: afterwards every file there is 0600
(sockets and locks too) and every directory 0700."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

from tcl.control.daemon.client import stop_daemon
from tcl.control.localshim import stop_local_shim

TCL = str(Path(sys.executable).parent / "tcl")

# The shim's unpacked copies of the user's code keep the modes they were shipped with (an
# executable script stays executable); their directory is 0700, so no one else reaches them.
_USER_TREES = Path("local-shim/state/code-cache/trees")


def _loose(root: Path) -> list[str]:
    """Every path under ``root`` (itself included) that is not 0700 (a dir) or 0600 (else)."""
    found = []
    for path in [root, *sorted(root.rglob("*"))]:
        rel = path.relative_to(root)
        if _USER_TREES in rel.parents:
            continue
        mode = stat.S_IMODE(path.lstat().st_mode)
        want = 0o700 if path.is_dir() and not path.is_symlink() else 0o600
        if mode != want:
            found.append(f"{oct(mode)} {rel}")
    return found


def test_a_local_job_leaves_only_private_files(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    state, code = home / "state", tmp_path / "team-code"
    for d in (home, work, state, code):
        d.mkdir()
    state.chmod(0o755)
    code.chmod(0o755)
    job = 'print("TCL_METRIC " + json.dumps({"step": 1, "loss": 0.5}))\nprint("done")\n'
    (work / "job.py").write_text("import json\n" + job)
    env = {k: v for k, v in os.environ.items() if k not in ("TCL_CONFIG", "TCL_DB_URL")}
    env.update(HOME=str(home), TCL_STATE_DIR=str(state), TCL_CODE_CACHE_DIR=str(code), NO_COLOR="1")

    def tcl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [TCL, *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
            umask=0o022,
        )

    try:
        res = tcl("submit", "--", "python", "job.py")
        assert res.returncode == 0, res.stderr
        assert res.stdout == "done\n"
        [run] = json.loads(tcl("ps", "-a", "--json").stdout)
        assert tcl("logs", run["run_id"]).stdout == "done\n"
        points = json.loads(tcl("metrics", run["run_id"], "--json").stdout)
        assert [p["values"] for p in points] == [{"loss": 0.5}]
        assert (state / "tcl.db").exists() and list((state / "logs").glob("*.jsonl"))
        assert list(code.glob("*.tar.gz")) and list((code / "index").glob("*.json"))
        assert (state / "serve" / "serve.log").exists()
        assert (state / "local-shim" / "shim.log").exists()
        loose = _loose(state) + [f"{code.name}: {p}" for p in _loose(code)]
        assert not loose, "\n".join(loose)
    finally:
        stop_daemon(state / "serve")
        stop_local_shim(state / "local-shim")
