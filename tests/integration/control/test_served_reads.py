"""`tcl ps` and `tcl logs` through the `tcl serve` daemon (real processes, the local default):
while a daemon answers, the CLI asks it and imports neither the store nor the backends; the
answers, and a user's error, are what the CLI builds itself when no daemon runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil

from tcl.control.daemon.client import running_daemon, stop_daemon
from tests.integration.tclcli import TCL, run_tcl, stop_local_shim_and_tasks, user_env

# `tcl ARGS` in this interpreter, then the modules it loaded, as JSON, on the last stderr line
PROBE = """\
import json, sys
sys.argv = [{tcl!r}, *{args!r}]
from tcl.cli.main import main
try:
    main()
except SystemExit as e:
    code = e.code
else:
    code = 0
print(json.dumps({{"code": code, "modules": sorted(sys.modules)}}), file=sys.stderr)
"""


def logs_commands(run: str) -> list[tuple[str, ...]]:
    """The `tcl logs` commands compared with and without a daemon."""
    return [
        ("logs", run),
        ("logs", "-f", run),
        ("logs", "--tail", "1", run),
        ("logs", "-f"),
        ("logs", "nosuch"),
    ]


HEAVY = ("sqlalchemy", "tcl.control.store", "tcl.control.backends", "tcl.control.service")


def _probe(home: Path, *args: str) -> tuple[int, str, str, set[str]]:
    """Exit code, stdout, stderr (less the probe's line) and loaded modules of `tcl ARGS`."""
    res = subprocess.run(
        [sys.executable, "-c", PROBE.format(tcl=TCL, args=list(args))],
        env=user_env(home),
        cwd=home / "work",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    *rest, last = res.stderr.splitlines()
    found = json.loads(last)
    return int(found["code"] or 0), res.stdout, "\n".join(rest), set(found["modules"])


def test_ps_and_logs_ask_the_daemon_and_answer_as_without_one(tmp_path: Path) -> None:
    home = tmp_path
    (home / "work").mkdir()
    env = user_env(home)
    try:
        job = "import sys; print('one'); print('two', file=sys.stderr); print('three')"
        ok = run_tcl(["submit", "--", "python3", "-c", job], env, home / "work")
        assert ok.stdout == "one\nthree\n"
        first = json.loads(run_tcl(["ps", "-a", "--json"], env).stdout)[0]["run_id"]
        bad = run_tcl(["submit", "--", "sh", "-c", "exit 3"], env, home / "work", check=False)
        assert bad.returncode == 3, bad.stderr
        assert running_daemon(home / "state" / "serve") is not None

        code, served, _, loaded = _probe(home, "ps", "-a", "--json")
        assert code == 0
        assert not {m for m in loaded if m.startswith(HEAVY)}, "ps read the store itself"
        table = _probe(home, "ps", "-a")
        assert table[0] == 0 and "RUN" in table[1] and "failed" in table[1], table
        wrong = _probe(home, "ps", "--matrix", "nosuch")
        logs = {args: _probe(home, *args)[:3] for args in logs_commands(first)}
        for args in logs_commands(first):
            assert not {m for m in _probe(home, *args)[3] if m.startswith(HEAVY)}, args

        assert stop_daemon(home / "state" / "serve")
        code, built, _, loaded = _probe(home, "ps", "-a", "--json")
        assert code == 0
        assert {m for m in loaded if m.startswith("sqlalchemy")}  # it read the store here
        assert json.loads(served) == json.loads(built)
        runs = json.loads(built)
        assert [(r["state"], r["exit_code"]) for r in runs] == [("failed", 3), ("succeeded", 0)]
        assert [a["state"] for a in runs[0]["attempts"]] == ["failed"]

        assert {args: _probe(home, *args)[:3] for args in logs_commands(first)} == logs
        assert logs[("logs", first)] == (0, "one\nthree\n", "two")
        assert logs[("logs", "-f", first)] == (
            0,
            "one\nthree\n",
            f"two\n[tcl] run {first} succeeded (exit code 0)",
        )
        assert logs[("logs", "--tail", "1", first)][0] == 0  # its last line, however it came
        newest = logs[("logs", "-f")]
        assert newest[0] == 3 and newest[2].startswith("logs of the most recent run, run-")
        assert logs[("logs", "nosuch")] == (
            1,
            "",
            "error: no run matches 'nosuch' (see `tcl ps -a`)",
        )

        # a user's error reads the same both ways: one line, its exit code
        alone = _probe(home, "ps", "--matrix", "nosuch")
        assert wrong[:3] == alone[:3] == (2, "", "error: no matrix 'nosuch' (see `tcl matrix ls`)")
    finally:
        stop_daemon(home / "state" / "serve")
        stop_local_shim_and_tasks(home / "state" / "local-shim")
        for p in psutil.process_iter(["cmdline"]):
            if any(str(home) in a for a in p.info["cmdline"] or []):
                p.kill()


def test_stop_asks_the_daemon_and_answers_as_without_one(tmp_path: Path) -> None:
    home = tmp_path
    (home / "work").mkdir()
    env = user_env(home)

    def sleeper() -> str:
        res = run_tcl(["submit", "-d", "--", "sleep", "120"], env, home / "work")
        run_id: str = json.loads(run_tcl(["ps", "--json"], env).stdout)[0]["run_id"]
        assert run_id in res.stdout + res.stderr
        return run_id

    try:
        served = sleeper()
        code, _, said, loaded = _probe(home, "stop", "--grace", "1")  # the one active run
        assert (code, said) == (0, f"run {served} terminated")
        assert not {m for m in loaded if m.startswith(HEAVY)}, "stop opened the store itself"
        wrong = _probe(home, "stop", "nosuch")[:3]

        built = sleeper()
        assert stop_daemon(home / "state" / "serve")
        code, _, said, loaded = _probe(home, "stop", "--grace", "1", built[:8])
        assert (code, said) == (0, f"run {built} terminated")
        assert {m for m in loaded if m.startswith("sqlalchemy")}  # it stopped it from here
        assert _probe(home, "stop", "nosuch")[:3] == wrong
        assert wrong == (1, "", "error: no run matches 'nosuch' (see `tcl ps -a`)")
        states = {
            r["run_id"]: r["state"] for r in json.loads(run_tcl(["ps", "-a", "--json"], env).stdout)
        }
        assert states == {served: "terminated", built: "terminated"}
    finally:
        stop_daemon(home / "state" / "serve")
        stop_local_shim_and_tasks(home / "state" / "local-shim")
        for p in psutil.process_iter(["cmdline"]):
            if any(str(home) in a for a in p.info["cmdline"] or []):
                p.kill()
