"""`tcl ps`, `tcl logs`, `tcl stop` and `tcl hosts` through the `tcl serve` daemon (real
processes, the local default): while a daemon answers, the CLI asks it and imports neither the
store nor the backends; the answers, and a user's error, are what the CLI builds itself when no
daemon runs."""

from __future__ import annotations

import http.server
import json
import os
import socket
import socketserver
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from tcl.control.daemon.api import API_VERSION, Health
from tcl.control.daemon.client import running_daemon, stop_daemon
from tcl.control.daemon.identity import current_identity
from tests.integration.tclcli import TCL, run_tcl, stop_local_shim_and_tasks, user_env

# `tcl ARGS` in this interpreter (never handed to the daemon's CLI fork server: the command's
# own imports are measured), then the modules it loaded, as JSON, on the last stderr line
PROBE = """\
import json, sys
sys.argv = [{tcl!r}, *{args!r}]
from tcl.cli.main import run_here
try:
    run_here(sys.argv[1:])
except SystemExit as e:
    code = e.code
else:
    code = 0
print(json.dumps({{"code": code, "modules": sorted(sys.modules)}}), file=sys.stderr)
"""


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


Probe = tuple[int, str, str]  # exit code, stdout, stderr


def test_reads_ask_the_daemon_and_answer_as_without_one(
    tmp_path: Path,
) -> None:
    home = tmp_path
    (home / "work").mkdir()
    env = user_env(home)

    def served(*args: str) -> Probe:
        """`tcl ARGS` while the daemon runs: it must not have read the store itself."""
        code, out, said, loaded = _probe(home, *args)
        assert not {m for m in loaded if m.startswith(HEAVY)}, f"{args}: read the store itself"
        return code, out, said

    def built(*args: str) -> Probe:
        """`tcl ARGS` with no daemon: the work is done in the CLI process."""
        code, out, said, loaded = _probe(home, *args)
        assert {m for m in loaded if m.startswith("sqlalchemy")}, f"{args}: no store opened"
        return code, out, said

    try:
        job = (
            "import sys; print('one'); print('two', file=sys.stderr); "
            'print(\'TCL_METRIC {"step": 1, "kind": "train", "loss": 0.5}\'); '
            "print('three')"
        )
        ok = run_tcl(["submit", "--", "python3", "-c", job], env, home / "work")
        assert ok.stdout == "one\nthree\n"
        first = json.loads(run_tcl(["ps", "-a", "--json"], env).stdout)[0]["run_id"]
        bad = run_tcl(["submit", "--", "sh", "-c", "exit 3"], env, home / "work", check=False)
        assert bad.returncode == 3, bad.stderr
        sleeper = run_tcl(["submit", "-d", "--", "sleep", "120"], env, home / "work")
        assert running_daemon(home / "state" / "serve") is not None
        stopped = served("stop", "--grace", "1")  # the one run not yet ended
        slept = json.loads(run_tcl(["ps", "-a", "--json"], env).stdout)[0]["run_id"]
        assert slept in sleeper.stdout + sleeper.stderr
        assert stopped == (0, "", f"run {slept} terminated")

        commands: list[tuple[str, ...]] = [
            ("ps", "-a", "--json"),
            ("ps", "--matrix", "nosuch"),
            ("logs", first),
            ("logs", "-f", first),
            ("logs", "-f"),
            ("logs", "nosuch"),
            ("stop", "nosuch"),
            ("hosts", "--check", "--json"),
            ("metrics", first, "--json"),
            ("metrics", first),
            ("metrics", "--kind", "val"),
            ("metrics", "nosuch"),
            ("matrix", "status", "--json"),
            ("matrix", "status", "nosuch"),
        ]
        answers = {args: served(*args) for args in commands}
        table = served("ps", "-a")
        assert table[0] == 0 and "RUN" in table[1] and "failed" in table[1], table

        assert stop_daemon(home / "state" / "serve")
        # the same answers with no daemon, a user's error included (one line, its exit code)
        assert {args: built(*args) for args in commands} == answers
        runs = json.loads(answers[("ps", "-a", "--json")][1])
        assert [(r["state"], r["exit_code"]) for r in runs[1:]] == [("failed", 3), ("succeeded", 0)]
        assert runs[0]["run_id"] == slept and runs[0]["state"] == "terminated"
        assert [a["state"] for a in runs[1]["attempts"]] == ["failed"]
        assert answers[("logs", first)] == (0, "one\nthree\n", "two")
        ended = f"two\n[tcl] run {first} succeeded (exit code 0)"
        assert answers[("logs", "-f", first)] == (0, "one\nthree\n", ended)
        newest = answers[("logs", "-f")]
        assert newest[2].startswith(f"logs of the most recent run, {slept}\n"), newest
        assert answers[("ps", "--matrix", "nosuch")] == (
            2,
            "",
            "error: no matrix 'nosuch' (see `tcl matrix ls`)",
        )
        (local,) = json.loads(answers[("hosts", "--check", "--json")][1])
        assert local["name"] == "local" and local["reachable"] is True, local
        unknown = (1, "", "error: no run matches 'nosuch' (see `tcl ps -a`)")
        assert answers[("logs", "nosuch")] == answers[("stop", "nosuch")] == unknown
        assert answers[("metrics", "nosuch")] == unknown
        assert answers[("matrix", "status", "--json")] == (0, "[]\n", "")
        code, _, said = answers[("matrix", "status", "nosuch")]
        assert code != 0 and "nosuch" in said, said
        (point,) = json.loads(answers[("metrics", first, "--json")][1])
        assert (point["step"], point["kind"], point["values"]) == (1, "train", {"loss": 0.5})
        assert "loss" in answers[("metrics", first)][1]
        assert answers[("metrics", "--kind", "val")] == (
            0,
            "",
            f"metrics of the most recent run, {slept}\n"
            f"run {slept} has no metric points of kind 'val' (a job prints them as "
            "TCL_METRIC lines on stdout)",
        )
    finally:
        stop_daemon(home / "state" / "serve")
        stop_local_shim_and_tasks(home / "state" / "local-shim")
        for p in psutil.process_iter(["cmdline"]):
            if any(str(home) in a for a in p.info["cmdline"] or []):
                p.kill()


class _OneAnswer(socketserver.UnixStreamServer):
    """A daemon that answers one healthcheck, then is gone (its idle exit, just after): the
    socket file stays, and the next connection is refused."""

    def __init__(self, path: Path, health: bytes) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(health)))
                self.end_headers()
                self.wfile.write(health)

            def log_message(self, *_: object) -> None:
                pass

        super().__init__(str(path), Handler)

    def answer_once(self) -> None:
        self.handle_request()
        self.socket.close()  # gone: the file stays, a connection is refused

    def get_request(self) -> tuple[socket.socket, str]:
        conn, _ = self.socket.accept()
        return conn, "local"


def test_a_daemon_gone_since_its_healthcheck_leaves_the_work_to_the_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path
    (home / "work").mkdir()
    env = user_env(home)
    base = home / "state" / "serve"
    try:
        run_tcl(["submit", "--", "python3", "-c", "print('kept')"], env, home / "work")
        run_id = json.loads(run_tcl(["ps", "-a", "--json"], env).stdout)[0]["run_id"]
        assert stop_daemon(base)
        for name in ("TCL_CONFIG", "TCL_DB_URL", "TCL_SERVE"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HOME", str(home))
        monkeypatch.setenv("TCL_STATE_DIR", str(home / "state"))
        health = Health(api_version=API_VERSION, pid=os.getpid(), identity=current_identity())

        def once(*args: str) -> tuple[int, str, str]:
            (base / "daemon.sock").unlink(missing_ok=True)
            with _OneAnswer(base / "daemon.sock", health.model_dump_json().encode()) as server:
                thread = threading.Thread(target=server.answer_once)
                thread.start()
                res = run_tcl(args, env, home / "work", check=False)
                thread.join(30)
            return res.returncode, res.stdout, res.stderr

        assert once("logs", run_id) == (0, "kept\n", "")
        code, out, _ = once("ps", "-a", "--json")
        assert code == 0 and [r["run_id"] for r in json.loads(out)] == [run_id]
        assert once("stop", "nosuch") == (
            1,
            "",
            "error: no run matches 'nosuch' (see `tcl ps -a`)\n",
        )
    finally:
        stop_daemon(base)
        stop_local_shim_and_tasks(home / "state" / "local-shim")
