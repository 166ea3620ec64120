"""The SSH pool against real sshd hosts: direct, jump host, forwards, errors, reconnects."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from tcl.control.errors import SshAuthError, SshCommandError, SshConnectError
from tcl.control.transport.ssh import SshPool, SshTarget
from tests.polling import await_until, wait_until
from tests.testbed import SshTestbed


def _target(tb: SshTestbed, name: str, host: str, **kw: object) -> SshTarget:
    return SshTarget(
        name=name,
        host=host,
        user="root",
        identity_file=tb.key,
        known_hosts=tb.known_hosts,
        config_file=tb.config,
        connect_timeout_s=3.0,
        **kw,  # type: ignore[arg-type]
    )


def _listening(pid: int, port: int) -> bool:
    """Whether something listens on ``port`` in the network namespace of process ``pid``
    (``/proc/PID/net/tcp``: that namespace's table; state 0A is LISTEN)."""
    rows = Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]
    return any(r.split()[1].endswith(f":{port:04X}") and r.split()[3] == "0A" for r in rows)


@pytest.fixture
def netns_http(tmp_path: Path) -> Iterator[int]:
    """An HTTP server listening on 127.0.0.1 *inside* netns infra-h2 (only a forward reaches it)."""
    (tmp_path / "index.html").write_text("inside-h2")
    port = 18090 + os.getpid() % 500
    proc = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            "infra-h2",
            "python3",
            "-m",
            "http.server",
            str(port),
            "--bind",
            "127.0.0.1",
            "--directory",
            str(tmp_path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_until(lambda: _listening(proc.pid, port), 30, f"http.server on port {port} in infra-h2")
    yield port
    proc.terminate()
    proc.wait(5)


def _get(port: int) -> str:
    body: bytes = urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read()
    return body.decode()


async def test_direct_jump_forward_and_errors(ssh_testbed: SshTestbed, netns_http: int) -> None:
    pool = SshPool()
    lo = _target(ssh_testbed, "lo", "127.0.0.1", port=2222)
    h2 = _target(ssh_testbed, "h2", "10.213.0.12", proxy_jump="127.0.0.1:2222")
    try:
        res = await pool.run(lo, ["echo", "a b;c"])  # argv is quoted: no shell injection
        assert res.stdout == "a b;c\n"
        res = await pool.run(h2, ["hostname", "-I"])
        assert res.stdout.split() == ["10.213.0.12"]
        assert pool.connects == 2  # the jump hop is not counted; one conn per target
        await pool.run(h2, ["true"])
        assert pool.connects == 2  # reused
        port = await pool.forward(h2, netns_http)
        assert await asyncio.to_thread(_get, port) == "inside-h2"
        assert await pool.forward(h2, netns_http) == port  # reused
        with pytest.raises(SshCommandError) as e:
            await pool.run(h2, ["sh", "-c", "echo oops >&2; exit 3"])
        assert e.value.remote_exit_code == 3 and "oops" in str(e.value)
    finally:
        await pool.close()


async def test_unreachable_is_retried_then_translated(ssh_testbed: SshTestbed) -> None:
    pool = SshPool()
    dead = _target(ssh_testbed, "dead", "127.0.0.1", port=1, connect_attempts=3)
    t0 = time.monotonic()
    with pytest.raises(SshConnectError, match="ssh dead"):
        await pool.run(dead, ["true"])
    assert time.monotonic() - t0 < 10


async def test_auth_error_is_not_retried(ssh_testbed: SshTestbed, tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    pool = SshPool()
    bad = SshTarget(
        name="bad",
        host="127.0.0.1",
        port=2222,
        user="root",
        identity_file=str(other),
        known_hosts=ssh_testbed.known_hosts,
        config_file=ssh_testbed.config,
    )
    with pytest.raises(SshAuthError, match="permission denied"):
        await pool.run(bad, ["true"])
    assert pool.connects == 0


async def test_reconnects_after_the_connection_is_cut(ssh_testbed: SshTestbed) -> None:
    pool = SshPool()
    lo = _target(ssh_testbed, "lo", "127.0.0.1", port=2222)
    try:
        res = await pool.run(lo, ["sh", "-c", "echo $PPID"])
        # the per-connection sshd process is the parent of the shell's parent session
        sess = int(res.stdout)
        child = int(Path(f"/proc/{sess}/stat").read_text().split()[3])
        conn_pid = child if child != ssh_testbed.pid("lo") else sess
        os.kill(conn_pid, signal.SIGKILL)
        # gone (the pool's connection is dead: its next command must reconnect)
        await await_until(lambda: not psutil.pid_exists(conn_pid), 30, "the cut connection")
        res = await pool.run(lo, ["echo", "again"])
        assert res.stdout == "again\n"
        assert pool.connects == 2
    finally:
        await pool.close()


async def test_started_process_waits_for_its_input_and_frees_its_session(
    ssh_testbed: SshTestbed,
) -> None:
    pool = SshPool()
    lo = _target(ssh_testbed, "lo", "127.0.0.1", port=2222, max_sessions=1)
    try:
        proc = await pool.start(lo, ["sh", "-c", 'read line; echo "got $line"; exit 5'])
        await asyncio.sleep(0.3)  # started, blocked on stdin: the input arrives later
        res = await proc.finish("late input\n")
        assert (res.exit_code, res.stdout) == (5, "got late input\n")
        # its session is back (max_sessions=1): this would hang otherwise
        res = await asyncio.wait_for(pool.run(lo, ["echo", "next"]), 10)
        assert res.stdout == "next\n"
        abandoned = await pool.start(lo, ["sh", "-c", "read line; echo never"])
        abandoned.close()
        assert (await asyncio.wait_for(pool.run(lo, ["true"]), 10)).exit_code == 0
    finally:
        await pool.close()


async def test_ensure_file_uploads_once(ssh_testbed: SshTestbed, tmp_path: Path) -> None:
    pool = SshPool()
    lo = _target(ssh_testbed, "lo", "127.0.0.1", port=2222)
    local = tmp_path / "blob.bin"
    local.write_bytes(os.urandom(70_000))
    remote = f"{tmp_path}/remote/new-dir/blob.bin"  # the parent is made on the way
    seen: list[tuple[int, int]] = []
    try:
        assert await pool.ensure_file(lo, local, remote, lambda d, t: seen.append((d, t)))
        assert Path(remote).read_bytes() == local.read_bytes()  # sshd on this machine
        assert seen and seen[-1] == (70_000, 70_000)
        two_days_ago = time.time() - 2 * 86400
        os.utime(remote, (two_days_ago, two_days_ago))
        assert not await pool.ensure_file(lo, local, remote)  # there already: nothing sent
        # but touched: its mtime says it was used now (the SLURM code eviction goes by it)
        assert time.time() - Path(remote).stat().st_mtime < 3600
        assert not list(Path(remote).parent.glob("*.part-*"))
    finally:
        await pool.close()


async def test_a_cancelled_upload_leaves_no_partial_file(
    ssh_testbed: SshTestbed, tmp_path: Path
) -> None:
    """Ctrl-C mid-upload (the submit's task is cancelled): the `.part` file is removed."""
    pool = SshPool()
    lo = _target(ssh_testbed, "lo", "127.0.0.1", port=2222)
    local = tmp_path / "big.bin"
    local.write_bytes(os.urandom(64 << 20))
    remote = f"{tmp_path}/remote/big.bin"
    started = asyncio.Event()
    try:
        upload = asyncio.create_task(
            pool.ensure_file(lo, local, remote, lambda d, t: started.set() if d else None)
        )
        await asyncio.wait_for(started.wait(), 30)
        upload.cancel()
        with pytest.raises(asyncio.CancelledError):
            await upload
        assert not Path(remote).exists()
        assert not list(Path(remote).parent.glob("*.part-*"))
    finally:
        await pool.close()


async def test_aes_gcm_is_negotiated_unless_the_config_names_ciphers(
    ssh_testbed: SshTestbed, tmp_path: Path
) -> None:
    """A real sshd agrees on AES-GCM (tcl's first choice); a host whose ssh config names its own
    Ciphers gets those, as OpenSSH's ssh would."""
    own = tmp_path / "ssh_config"
    own.write_text(
        "Host 127.0.0.1\n  Ciphers chacha20-poly1305@openssh.com\n\n"
        + Path(ssh_testbed.config).read_text()
    )
    pool = SshPool()
    try:
        conn = await pool.connection(_target(ssh_testbed, "lo", "127.0.0.1", port=2222))
        assert conn.get_extra_info("send_cipher") == "aes128-gcm@openssh.com"
        assert conn.get_extra_info("recv_cipher") == "aes128-gcm@openssh.com"
        chosen = replace(
            _target(ssh_testbed, "lo-own", "127.0.0.1", port=2222), config_file=str(own)
        )
        conn = await pool.connection(chosen)
        assert conn.get_extra_info("send_cipher") == "chacha20-poly1305@openssh.com"
        assert (await pool.run(chosen, ["echo", "ok"])).stdout == "ok\n"
    finally:
        await pool.close()
