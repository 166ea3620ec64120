"""The CLI fork server beside `tcl serve` (real processes, the local default): a handed command
runs forked from it, with the client's directory, environment, streams and exit code, and
answers as the same command run in its own process; Ctrl-C reaches it; a request it cannot take
(other code, a bad request) leaves the command to the client; it ends with its daemon."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tcl.cli.forkwire import SOCKET, ForkRequest
from tcl.control.daemon.client import running_daemon
from tests.integration.tclcli import TCL, run_tcl, start_tcl, stop_tcl, user_env
from tests.polling import wait_until

# `tcl ARGS` in this interpreter: its exit code and whether it imported the CLI's own stack
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
heavy = sorted(m for m in ("typer", "pydantic", "rich") if m in sys.modules)
print(json.dumps({{"code": code, "heavy": heavy}}), file=sys.stderr)
"""


class Lab:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.env = user_env(home)
        self.base = home / "state" / "serve"
        (home / "work").mkdir()
        self.serve: subprocess.Popen[str] | None = None  # `tcl serve`, in the foreground

    def probe(self, *args: str, **extra: str) -> tuple[int, str, str, list[str]]:
        """Exit code, stdout, stderr (less the probe's line) and which of typer, pydantic and
        rich the `tcl` process itself imported."""
        res = subprocess.run(
            [sys.executable, "-c", PROBE.format(tcl=TCL, args=list(args))],
            env={**self.env, **extra},
            cwd=self.home / "work",
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        *rest, last = res.stderr.splitlines()
        found = json.loads(last)
        return int(found["code"] or 0), res.stdout, "\n".join(rest), found["heavy"]

    def server(self) -> psutil.Process:
        """The fork server of the running daemon."""
        daemon = running_daemon(self.base)
        assert daemon is not None
        found = wait_until(
            lambda: next(
                (
                    p
                    for p in psutil.Process(daemon.pid).children()
                    if "tcl.cli.forkserver" in " ".join(p.cmdline())
                ),
                None,
            ),
            30,
            "the daemon's fork server",
        )
        assert found is not None
        return found


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    lab = Lab(tmp_path)
    # started with SIGINT ignored, as from a shell's background job: the fork server inherits
    # that, and a Ctrl-C relayed to a command it has just forked must still reach it
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        lab.serve = start_tcl(["serve", "--idle-exit-s", "300"], lab.env, lab.home / "work")
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        wait_until(lambda: (lab.base / SOCKET).exists(), 60, "the CLI fork server's socket")
        yield lab
    finally:
        stop_tcl(lab.serve)


def test_a_handed_command_answers_as_its_own_process_would(lab: Lab) -> None:
    bad = lab.home / "work" / "bad.yaml"
    bad.write_text("hosts: [\n")
    for args, extra in (
        (("ps", "-a", "--json"), {}),
        (("logs", "no-such-run"), {}),
        (("ps",), {"TCL_CONFIG": "bad.yaml"}),  # relative: the client's directory
    ):
        handed = lab.probe(*args, **extra)
        here = lab.probe(*args, TCL_CLI_FORK="0", **extra)
        assert handed[3] == [], f"{args}: ran in the client ({handed[3]} imported)"
        assert here[3] != [], f"{args}: TCL_CLI_FORK=0 still handed it over"
        assert handed[:3] == here[:3], args
    assert lab.probe("ps", "-a", "--json")[:2] == (0, "[]\n")
    assert lab.probe("logs", "no-such-run")[0] != 0
    code, _out, said, _ = lab.probe("ps", TCL_CONFIG="bad.yaml")
    assert code != 0 and "bad.yaml" in said, said


def test_ctrl_c_reaches_the_command_and_nothing_is_left(lab: Lab) -> None:
    server = lab.server()
    watch = start_tcl(["ps", "--watch"], lab.env, lab.home / "work")
    try:
        child = wait_until(lambda: next(iter(server.children()), None), 30, "the forked ps")
        assert child is not None and child.pid != watch.pid
        watch.send_signal(signal.SIGINT)
        _out, err = watch.communicate(timeout=30)
        # 0: it was in its refresh loop, which ends on Ctrl-C; 130: it was still starting
        assert watch.returncode in (0, 130) and "Traceback" not in err, err
        # the forked command ended with it (and was reaped by the server)
        wait_until(lambda: not server.children(), 10, "the forked ps gone")
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.wait()


def test_a_command_whose_client_was_killed_ends_too(lab: Lab) -> None:
    """SIGKILL cannot be forwarded: the command notices its client gone, as a hang-up."""
    server = lab.server()
    watch = start_tcl(["ps", "--watch"], lab.env, lab.home / "work")
    try:
        wait_until(lambda: server.children(), 30, "the forked ps")
    finally:
        watch.kill()
        watch.wait()
    wait_until(lambda: not server.children(), 10, "the forked ps gone")


def _gone(p: psutil.Process) -> bool:
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _ask(path: Path, req: bytes, fds: list[int]) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(path))
        socket.send_fds(sock, [req], fds)
        return sock.makefile("rb").readline().decode().strip()


def test_a_request_it_cannot_take_starts_nothing_and_the_server_goes_on(lab: Lab) -> None:
    server = lab.server()
    path = lab.base / SOCKET
    other = ForkRequest(
        argv=["ps"], cwd="/", env={}, umask=0o22, source="0" * 16, python=sys.executable
    )
    null = os.open(os.devnull, os.O_RDWR)
    try:
        assert _ask(path, other.encode(), [null, null, null]) == "stale"
        bad = b"\x00\x00\x00\x02{}"
        assert _ask(path, bad, [null, null, null]).startswith("error version")
        assert _ask(path, b"\x00\x00\x00\x02{}", []).startswith("error stdin, stdout")
    finally:
        os.close(null)
    assert not server.children()
    assert run_tcl(["ps", "-a", "--json"], lab.env, lab.home / "work").stdout == "[]\n"


def test_it_ends_with_its_daemon(lab: Lab) -> None:
    server = lab.server()
    assert lab.serve is not None
    stop_tcl(lab.serve)  # SIGTERM, as `tcl serve --stop` sends
    wait_until(lambda: _gone(server), 30, "the fork server gone")
    assert not (lab.base / SOCKET).exists()
    # with no daemon the command runs in its own process
    code, out, _said, heavy = lab.probe("ps", "-a", "--json")
    assert (code, out) == (0, "[]\n") and heavy


def test_a_fork_server_that_will_not_stop_does_not_hold_its_daemon(lab: Lab) -> None:
    """A stopped fork server (SIGSTOP: SIGTERM waits, as for one stuck in the kernel) is killed
    a few seconds into its daemon's stop, which then ends: nothing is left."""
    server = lab.server()
    assert lab.serve is not None
    server.suspend()
    try:
        stop_tcl(lab.serve, timeout_s=30)
        assert _gone(server)
    finally:
        with contextlib.suppress(psutil.NoSuchProcess):
            server.kill()


def test_one_whose_daemon_died_while_it_started_ends(tmp_path: Path) -> None:
    """Its daemon is gone before it finished importing (a `tcl serve` stopped at once): it ends
    without serving, instead of taking the reaper that adopted it for its daemon."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    sock = tmp_path / SOCKET
    argv = ["-m", "tcl.cli.forkserver", "--socket", str(sock), "--parent", str(dead.pid)]
    res = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert not sock.exists()


def test_it_ends_when_its_daemon_is_killed(lab: Lab) -> None:
    server = lab.server()
    assert lab.serve is not None
    lab.serve.kill()
    lab.serve.wait()
    wait_until(lambda: _gone(server), 30, "the fork server gone")
