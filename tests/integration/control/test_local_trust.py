"""Local trust boundaries of the local default (real `tcl`, real daemon, real local shim).

- Another user's process at the daemon's or the local shim's socket (or at the TCP port a stale
  record names) gets no byte from the CLI: no token, no secret; nothing it names is killed.
- A ``--secret`` reaches its own job only: not the daemon, not the shim, not a later run, not a
  file of the state dir.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tcl.control.daemon.client import stop_daemon
from tests.integration.tclcli import run_tcl, stop_local_shim_and_tasks, user_env

NOBODY = 65534

# Binds the socket as root (only root could write in the victim's 0700 dir: the strongest
# position for the attacker), then becomes another user before listen(): the kernel reports
# that user for the listener. Whatever it receives goes to stdout as hex, one line per read.
_FAKE = r"""
import os, socket, sys, selectors
path, port = sys.argv[1], int(sys.argv[2])
u = socket.socket(socket.AF_UNIX); u.bind(path); os.chmod(path, 0o666)
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("127.0.0.1", port))
os.setgroups([]); os.setgid(NOBODY); os.setuid(NOBODY)
u.listen(16); t.listen(16)
print("ready", flush=True)
sel = selectors.DefaultSelector()
for s in (u, t):
    sel.register(s, selectors.EVENT_READ, "listen")
while True:
    for key, _ in sel.select():
        if key.data == "listen":
            conn, _ = key.fileobj.accept()
            print("connect", flush=True)
            sel.register(conn, selectors.EVENT_READ, "conn")
        else:
            data = key.fileobj.recv(65536)
            if not data:
                sel.unregister(key.fileobj); key.fileobj.close(); continue
            print("data", data.hex(), flush=True)
            key.fileobj.sendall(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
""".replace("NOBODY", str(NOBODY))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "work").mkdir()
    yield tmp_path
    stop_daemon(tmp_path / "state" / "serve")
    stop_local_shim_and_tasks(tmp_path / "state" / "local-shim")
    for p in psutil.process_iter(["cmdline"]):
        if any(str(tmp_path) in a for a in p.info["cmdline"] or []):
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()


def _tcl(
    home: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_tcl(args, env or user_env(home), home / "work", check=False, timeout=180)


class _Fake:
    """Another user's listener at ``path`` and on a TCP port; what it received."""

    def __init__(self, path: Path) -> None:
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _FAKE, str(path), str(self.port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "ready"

    def received(self) -> list[str]:
        self.proc.kill()
        out, _ = self.proc.communicate(timeout=10)
        return out.splitlines()


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """A process of the user's that a stale record names (as a reused pid would be)."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a listener as another user")
def test_another_users_listener_gets_no_token_no_secret_and_nothing_is_killed(
    home: Path, victim: subprocess.Popen[bytes]
) -> None:
    serve, shim = home / "state" / "serve", home / "state" / "local-shim"
    for d in (serve, shim):
        d.mkdir(parents=True, mode=0o700)
    fake_daemon = _Fake(serve / "daemon.sock")
    fake_shim = _Fake(shim / "shim.sock")
    # stale records as an older tcl left them, naming the fakes' ports and the victim's pid
    (serve / "daemon.json").write_text(
        json.dumps({"version": 1, "pid": victim.pid, "port": fake_daemon.port})
    )
    (serve / "token").write_text("t" * 43)
    (shim / "shim.json").write_text(
        json.dumps(
            {
                "version": 2,
                "pid": victim.pid,
                "port": fake_shim.port,
                "executor": "process",
                "fake_accelerators": None,
            }
        )
    )
    (shim / "token").write_text("old-shim-token-" + "s" * 40)
    secret = "s3cr3t-" + os.urandom(8).hex()
    res = _tcl(
        home,
        "submit",
        "--secret",
        "TCL_TEST_SECRET",
        "--",
        "python3",
        "-c",
        "import os; print('job sees', len(os.environ['TCL_TEST_SECRET']))",
        env=user_env(home, TCL_TEST_SECRET=secret),
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == f"job sees {len(secret)}\n"
    assert "runs as uid 65534, not as this user" in res.stderr  # said, not silently used
    for fake in (fake_daemon, fake_shim):
        got = fake.received()
        assert not [line for line in got if line.startswith("data")], got
    assert victim.poll() is None  # nothing killed on the word of a record or a listener
    new_token = (shim / "token").read_text().strip()
    assert not new_token.startswith("old-shim-token-")  # rotated at the shim's start


def _holders(value: bytes) -> list[tuple[int, str]]:
    """(pid, command line) of every process whose environment holds ``value``."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(OSError, psutil.Error):
            if value in Path(f"/proc/{p.pid}/environ").read_bytes():
                found.append((p.pid, " ".join(p.info["cmdline"] or [])))
    return found


def _files_holding(root: Path, value: bytes) -> list[Path]:
    hits = []
    for path in root.rglob("*"):
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink() and value in path.read_bytes():
                hits.append(path)
    return hits


def test_a_secret_reaches_its_own_job_only(home: Path) -> None:
    secret = "s3cr3t-" + os.urandom(8).hex()
    shell_key = "cloud-" + os.urandom(8).hex()  # any other variable of the first shell
    marker = "first-job-" + os.urandom(4).hex()
    first_env = user_env(home, TCL_TEST_SECRET=secret, AWS_SECRET_ACCESS_KEY=shell_key)
    first = _tcl(
        home,
        "submit",
        "-d",
        "--json",
        "--secret",
        "TCL_TEST_SECRET",
        "--",
        "python3",
        "-c",
        f"import time; print({marker!r}, flush=True); time.sleep(600)",
        env=first_env,
    )
    assert first.returncode == 0, first.stderr
    run = json.loads(first.stdout)["run_id"]
    # a later run from a clean shell, while the first one still runs
    # (by hash: the values themselves must not travel in the second run's command line)
    hashes = {hashlib.sha256(v.encode()).hexdigest() for v in (secret, shell_key)}
    probe = (
        f"import os, hashlib; hs = {hashes!r}; print(sorted(k for k, v in os.environ.items() "
        "if hashlib.sha256(v.encode()).hexdigest() in hs))"
    )
    second = _tcl(home, "submit", "--", "python3", "-c", probe)
    assert second.returncode == 0, second.stderr
    assert second.stdout == "[]\n"
    deadline = time.monotonic() + 60
    while marker not in _tcl(home, "logs", run).stdout:
        assert time.monotonic() < deadline, "the first job never started"
        time.sleep(0.5)
    holders = _holders(secret.encode())
    assert holders and all(marker in cmd for _, cmd in holders), holders  # the first job only
    assert not _holders(shell_key.encode())
    assert not _files_holding(home / "state", secret.encode())
    assert _tcl(home, "stop", run).returncode == 0


def test_a_shim_an_older_tcl_started_on_tcp_is_replaced(home: Path) -> None:
    """Upgrade: a local shim on a TCP port with a version-1 record holds the state dir; the new
    tcl stops it (its pid checked to be this user's shim of this state dir) and starts its own."""
    base = home / "state" / "local-shim"
    base.mkdir(parents=True, mode=0o700)
    (base / "token").write_text("o" * 43 + "\n")
    (base / "token").chmod(0o600)
    port = _free_port()
    argv = [
        str(Path(sys.executable).parent / "tcl-shim"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--state-dir",
        str(base / "state"),
        "--token-file",
        str(base / "token"),
        "--executor",
        "process",
    ]
    old = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (base / "state" / "lock").exists() or not _listening(port):
            assert time.monotonic() < deadline and old.poll() is None
            time.sleep(0.1)
        record = {
            "version": 1,
            "pid": old.pid,
            "port": port,
            "executor": "process",
            "fake_accelerators": None,
        }
        (base / "shim.json").write_text(json.dumps(record))
        res = _tcl(home, "submit", "--", "python3", "-c", "print('after upgrade')")
        assert res.returncode == 0 and res.stdout == "after upgrade\n", res.stderr
        assert old.wait(timeout=30) is not None
    finally:
        old.kill()
        old.wait()


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
