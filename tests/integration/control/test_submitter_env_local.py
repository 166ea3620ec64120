"""Issue 30: a job on the local default starts from its submitter's shell (`PATH`, `LANG`...),
not from the shell that happened to start `tcl serve` and its local shim; nothing else of
either shell reaches it unless the submit names it (`--env KEY`)."""

from __future__ import annotations

from pathlib import Path

from tests.integration.tclcli import run_tcl, stop_local_shim_and_tasks, user_env

PROBE = 'tcltool; echo "lang=$LANG only=${TCL_TEST_SHELL_ONLY:-unset}"'


def _tool_dir(tmp_path: Path, name: str) -> Path:
    """A directory with a `tcltool` that says which shell's PATH found it."""
    d = tmp_path / f"bin-{name}"
    d.mkdir()
    tool = d / "tcltool"
    tool.write_text(f"#!/bin/sh\necho tool {name}\n")
    tool.chmod(0o755)
    return d


def test_each_job_starts_from_its_own_submitter_s_path(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    base = user_env(home, drop=("TCL_CONFIG", "TCL_DB_URL"))
    shell_a = {
        **base,
        "PATH": f"{_tool_dir(tmp_path, 'a')}:{base['PATH']}",
        "LANG": "C.UTF-8",
        "TCL_TEST_SHELL_ONLY": "a",
    }
    shell_b = {**base, "PATH": f"{_tool_dir(tmp_path, 'b')}:{base['PATH']}", "LANG": "C"}
    try:
        # shell A's submit starts the daemon and the local shim: they have A's PATH
        first = run_tcl(["submit", "--", "sh", "-c", PROBE], shell_a, work)
        assert "tool a\nlang=C.UTF-8 only=unset" in first.stdout, first.stdout
        # the same daemon and shim run shell B's job with B's PATH and LANG
        second = run_tcl(["submit", "--", "sh", "-c", PROBE], shell_b, work)
        assert "tool b\nlang=C only=unset" in second.stdout, second.stdout
        # a variable of the shell travels when the submit names it
        named = run_tcl(
            ["submit", "--env", "TCL_TEST_SHELL_ONLY", "--", "sh", "-c", PROBE], shell_a, work
        )
        assert "only=a" in named.stdout, named.stdout
    finally:
        stop_local_shim_and_tasks(home / "state" / "local-shim")
