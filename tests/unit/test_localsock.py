"""Local agents' Unix sockets (tcl.localsock): who may connect, who a client talks to."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

from tcl.localsock import PeerCheckedSocket, PeerError, check_peer, listen_unix

NOBODY = 65534
# the system interpreter: another user may not be able to enter this checkout's venv
STRANGER_PYTHON = "/usr/bin/python3"


def test_listen_unix_makes_a_0600_socket_and_refuses_a_shared_directory(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    sock = listen_unix(private / "agent.sock")
    try:
        assert (private / "agent.sock").stat().st_mode & 0o777 == 0o600
    finally:
        sock.close()
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    shared.chmod(0o755)
    with pytest.raises(PeerError, match="chmod 700"):
        listen_unix(shared / "agent.sock")


def test_a_client_of_this_user_is_accepted_and_knows_the_listeners_pid(tmp_path: Path) -> None:
    tmp_path.chmod(0o700)
    server = listen_unix(tmp_path / "a.sock")
    server.setblocking(True)
    client = socket.socket(socket.AF_UNIX)
    client.connect(str(tmp_path / "a.sock"))
    conn, _ = server.accept()
    assert check_peer(client, "agent").pid == os.getpid()
    conn.close()
    client.close()
    server.close()


@pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists(STRANGER_PYTHON),
    reason="needs root (to connect as another user) and /usr/bin/python3",
)
def test_another_users_connection_is_dropped_before_a_byte_is_read() -> None:
    # a socket any user may open (as if its directory were shared), served by a peer-checked
    # listener: the other user's connection is closed at accept, this user's gets through
    open_dir = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's tmp dirs are closed to others
    open_dir.chmod(0o755)
    path = open_dir / "a.sock"
    server = PeerCheckedSocket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    path.chmod(0o666)
    server.listen(8)
    code = (
        "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
        "s.sendall(b'GET / HTTP/1.1\\r\\n\\r\\n'); print('connected', flush=True); "
        "s.settimeout(20)\n"
        "try:\n    got = s.recv(100)\nexcept ConnectionResetError:\n    got = b''\n"
        "print('closed' if got == b'' else repr(got), flush=True)"
    )
    stranger = subprocess.Popen(
        [STRANGER_PYTHON, "-c", code, str(path)],
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert stranger.stdout is not None
    assert stranger.stdout.readline().strip() == "connected"  # first in the accept queue
    ours = socket.socket(socket.AF_UNIX)
    ours.connect(str(path))
    server.settimeout(20)
    conn, _ = server.accept()  # drops the stranger's connection, returns ours
    assert check_peer(conn, "client").uid == os.geteuid()
    out, _ = stranger.communicate(timeout=30)
    assert out.strip() == "closed"  # closed on it: nothing answered
    for s in (conn, ours, server):
        s.close()
    shutil.rmtree(open_dir)
