"""`tcl serve`: the daemon `tcl submit` hands its work to (real processes, the local default)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from pathlib import Path
from subprocess import CompletedProcess

import httpx
import psutil
import pytest

from tcl.control.daemon.client import stop_daemon
from tests.integration.tclcli import run_tcl, start_tcl, stop_local_shim_and_tasks, user_env
from tests.polling import wait_until


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    return tmp_path


def _tcl(home: Path, *args: str, **extra: str) -> CompletedProcess[str]:
    env = user_env(home, None, **extra)  # None: no config file, the local default
    return run_tcl(args, env, home / "work", check=False, timeout=120)


def _sock(home: Path) -> Path:
    return home / "state" / "serve" / "daemon.sock"


def _get(home: Path, path: str) -> tuple[int, bytes]:
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(_sock(home))), timeout=5) as c:
        resp = c.get(f"http://localhost{path}")
    return resp.status_code, resp.content


def _pid(home: Path) -> int:
    """The daemon's pid, from its healthcheck (this test trusts its own daemon)."""
    status, body = _get(home, "/api/healthcheck")
    assert status == 200, body
    return int(json.loads(body)["pid"])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        Path(f"/proc/{pid}").exists()
        and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
    )


@pytest.fixture(autouse=True)
def _cleanup(home: Path) -> object:
    yield None
    stop_daemon(home / "state" / "serve")
    stop_local_shim_and_tasks(home / "state" / "local-shim")
    # runners of `-d` runs nobody followed outlive their stopped shim (they keep their logs)
    for p in psutil.process_iter(["cmdline"]):
        if any(str(home) in a for a in p.info["cmdline"] or []):
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()


def test_submits_share_one_daemon_on_a_private_socket(home: Path) -> None:
    res = _tcl(home, "submit", "--", "python3", "-c", "print('one')")
    assert res.returncode == 0 and res.stdout == "one\n", res.stderr
    pid = _pid(home)
    res = _tcl(home, "submit", "--", "python3", "-c", "raise SystemExit(3)")
    assert res.returncode == 3 and "failed (exit code 3)" in res.stderr
    assert _pid(home) == pid  # the same daemon served both
    status, body = _get(home, "/api/status")
    assert status == 200 and json.loads(body)["submits"] == 2
    assert _sock(home).stat().st_mode & 0o777 == 0o600
    assert _sock(home).parent.stat().st_mode & 0o777 == 0o700
    # nothing of the daemon listens on TCP
    listening = {c.laddr.port for c in psutil.Process(pid).net_connections("inet")}
    assert not listening, listening


def test_the_daemon_goes_when_idle(home: Path) -> None:
    # it owns the run while it runs (not idle then): still there when asked for its pid
    res = _tcl(home, "submit", "-d", "--", "sleep", "3", TCL_SERVE_IDLE_EXIT_S="1")
    assert res.returncode == 0, res.stderr
    pid = _pid(home)
    deadline = time.monotonic() + 20
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(pid)
    assert not _sock(home).exists()


def test_a_daemon_started_for_another_home_is_replaced(home: Path, tmp_path: Path) -> None:
    assert _tcl(home, "submit", "-d", "--", "true").returncode == 0
    first = _pid(home)
    other_home = tmp_path / "other-home"
    other_home.mkdir()
    res = _tcl(home, "submit", "--", "python3", "-c", "print('here')", HOME=str(other_home))
    assert res.returncode == 0 and res.stdout == "here\n", res.stderr
    assert _pid(home) != first and not _alive(first)


def test_a_config_error_through_the_daemon_names_key_and_line(home: Path) -> None:
    cfg = home / "bad.yaml"
    cfg.write_text("hosts:\n  box:\n    type: local\n    executr: process\n")
    assert _tcl(home, "submit", "-d", "--", "true").returncode == 0  # a daemon runs already
    res = _tcl(home, "-c", "../bad.yaml", "submit", "--", "true")  # relative to the shell's cwd
    assert res.returncode == 2
    assert f"{cfg}:4: hosts.box.executr: unknown key" in res.stderr


def test_relative_paths_are_the_shells_not_the_daemons(home: Path) -> None:
    sub = home / "work" / "sub"
    sub.mkdir()
    (sub / "x.py").write_text("print('from sub')\n")
    assert _tcl(home, "submit", "-d", "--", "true").returncode == 0  # a daemon runs already
    res = _tcl(home, "submit", "--dir", "sub", "--", "python3", "x.py")
    assert res.returncode == 0 and res.stdout == "from sub\n", res.stderr


def test_follow_resumes_through_a_new_daemon_when_it_dies(home: Path) -> None:
    """kill -9 of the daemon mid-follow: the CLI starts another and prints every line once."""
    job = (
        "import time\nfor i in range(30):\n    print('line', i, flush=True)\n    time.sleep(0.1)\n"
    )
    (home / "work" / "job.py").write_text(job)
    proc = start_tcl(["submit", "--", "python3", "job.py"], user_env(home), home / "work")
    assert proc.stdout is not None and proc.stderr is not None
    seen = []
    for line in proc.stdout:
        seen.append(line.rstrip("\n"))
        if len(seen) == 3:
            os.kill(_pid(home), signal.SIGKILL)
    err = proc.stderr.read()
    assert proc.wait(60) == 0, err
    assert seen == [f"line {i}" for i in range(30)]
    assert "reconnecting" in err


def test_ctrl_c_before_the_run_starts_cancels_it_in_the_daemon(home: Path) -> None:
    # A host that takes the TCP connection and never says a word of SSH: the submit waits in
    # "finding hosts" (until the connect timeout).
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)
    cfg = home / "slow.yaml"
    cfg.write_text(
        f"hosts:\n  far: {{type: ssh, ssh: 127.0.0.1, port: {mute.getsockname()[1]},"
        " connect_timeout_s: 60}\n"
    )
    proc = start_tcl(["-c", str(cfg), "submit", "--", "true"], user_env(home), home / "work")
    deadline = time.monotonic() + 30
    while not _sock(home).exists():
        assert time.monotonic() < deadline
        time.sleep(0.1)
    # the request is in the daemon now: its stream is open there
    wait_until(
        lambda: json.loads(_get(home, "/api/status")[1])["streams"], 30, "the submit's stream"
    )
    # a Ctrl-C at once, as the stream opens (it ended the submit "without a result" when it
    # came before the submit reached a step that reports its own cancel)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "cancelled; nothing was placed" in err
    _, body = _get(home, "/api/status")
    assert json.loads(body)["streams"] == 0
    mute.close()


def _other_install(tmp_path: Path, version: str | None = None) -> Path:
    """A second copy of the tcl package (as a project's venv next to a tool install has),
    optionally of another version: run with it first on PYTHONPATH."""
    import shutil

    import tcl

    root = tmp_path / f"other-{version or 'same'}"
    shutil.copytree(
        Path(tcl.__file__).parent, root / "tcl", ignore=shutil.ignore_patterns("__pycache__")
    )
    if version is not None:
        init = root / "tcl" / "__init__.py"
        text = init.read_text()
        init.write_text(
            text.replace(f'__version__ = "{tcl.__version__}"', f'__version__ = "{version}"')
        )
    return root


def _tcl_from(root: Path, home: Path, *args: str) -> CompletedProcess[str]:
    import subprocess
    import sys

    env = {**user_env(home, None), "PYTHONPATH": str(root)}
    code = "import sys; from tcl.cli.main import main; sys.argv[0] = 'tcl'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=home / "work",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_another_install_of_the_same_version_shares_the_daemon(home: Path, tmp_path: Path) -> None:
    """A tool install and a project's venv (for `@tcl.remote`) used to replace each other's
    daemon on every command, dropping its warm connections (issue 30)."""
    assert _tcl(home, "submit", "-d", "--", "true").returncode == 0
    first = _pid(home)
    other = _other_install(tmp_path)
    res = _tcl_from(other, home, "submit", "--", "python3", "-c", "print('from the other')")
    assert res.returncode == 0 and res.stdout == "from the other\n", res.stderr
    assert _pid(home) == first  # shared, not replaced
    assert _tcl(home, "submit", "--", "true").returncode == 0 and _pid(home) == first


def test_another_install_of_another_version_is_refused_not_replacing_it(
    home: Path, tmp_path: Path
) -> None:
    assert _tcl(home, "submit", "-d", "--", "true").returncode == 0
    first = _pid(home)
    other = _other_install(tmp_path, "0.0.0+other")
    res = _tcl_from(other, home, "submit", "--", "python3", "-c", "print('in process')")
    # said, and the submit runs from its own process (as when no daemon can start)
    assert "a tcl serve of tcl " in res.stderr and "this is tcl 0.0.0+other" in res.stderr
    assert "not compatible" in res.stderr and "submitting from this process" in res.stderr
    assert res.returncode == 0 and res.stdout == "in process\n", res.stderr
    assert _pid(home) == first and _alive(first)  # left running


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signalled_daemon_cleans_up_before_it_ends(home: Path, sig: signal.Signals) -> None:
    """SIGTERM (systemd, `kill`) or Ctrl-C stops `tcl serve` as `tcl serve --stop` does: its
    controller and scheduler hand back what they hold, its socket goes, then it ends by that
    signal. uvicorn raises the signal again once it stopped serving: with no handler of the
    daemon's own, that killed it before any of this ran."""
    serve = start_tcl(["serve"], user_env(home), home / "work")
    try:
        wait_until(lambda: _sock(home).exists() and _pid(home), 60, "the daemon")
        serve.send_signal(sig)
        serve.communicate(timeout=60)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.communicate()
    assert serve.returncode == -sig
    assert not _sock(home).exists()
