"""A pool of asyncssh connections: one per host, jump hosts, forwards, backoff, limits.

* One connection per host, shared by every command, file transfer and port forward to it;
  a dropped connection is noticed (``is_closed``) and replaced on next use.
* ``~/.ssh/config`` is honoured (asyncssh reads it; ``ssh_config_file`` replaces it), and
  ``proxy_jump`` hops are connected one through the other with the same options.
* Ciphers: AES-GCM first (:data:`PREFERRED_CIPHERS`), unless the host's ssh config names its
  own ``Ciphers``, which then stand as written.
* Connection set-up is retried with jittered exponential backoff on connection errors only
  (refused, timeout, lost); authentication failures and remote command failures are never
  retried, and a command is never re-sent blindly.
* A per-host semaphore bounds concurrent channels (``max_sessions``); there is no global lock.
* asyncssh and OSError exceptions are translated into ``tcl.control.errors`` here.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import posixpath
import secrets
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
from asyncssh.config import SSHClientConfig

from tcl.control.backoff import backoff_s
from tcl.control.config import SshOptions
from tcl.control.errors import SshAuthError, SshCommandError, SshConnectError, SshError

# AES-GCM before asyncssh's default first choice, chacha20-poly1305: every byte of a followed
# log, a file transfer and a forward is encrypted here, and with the AES instructions of any
# current x86 or ARMv8 CPU AES-GCM costs asyncssh 2.5 ms of CPU per MB against chacha's 4.0
# (measured on the 2-core test machine). The rest is asyncssh's own list, in its order.
PREFERRED_CIPHERS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "chacha20-poly1305@openssh.com",
    "aes256-ctr",
    "aes192-ctr",
    "aes128-ctr",
)


def config_names_ciphers(
    config_file: str | None, host: str, port: int | None, user: str | None
) -> bool:
    """Whether the ssh config asyncssh will read for this host (``config_file``, else
    ``~/.ssh/config``) sets ``Ciphers`` for it: an explicit list given to asyncssh would
    replace the user's, so it is given only when the config names none."""
    path = Path(config_file).expanduser() if config_file else Path("~/.ssh/config").expanduser()
    if not os.access(path, os.R_OK):
        return False
    try:
        local = getpass.getuser()
    except (KeyError, OSError):
        local = ""
    unset = ()  # how asyncssh itself passes a user or port that was not given
    try:
        config = SSHClientConfig.load(
            None,
            [path],
            False,
            False,
            False,
            local,
            unset if user is None else user,
            host,
            unset if port is None else port,
        )
    except (OSError, asyncssh.Error, ValueError):
        return False  # asyncssh reports a broken config itself when it connects
    return bool(config.get("Ciphers"))


async def _options(target: SshTarget) -> dict[str, Any]:
    """``target.options()`` off the event loop: it reads the ssh config (as asyncssh reads it,
    in an executor), and a slow home directory must not stall the daemon's other work."""
    return await asyncio.to_thread(target.options)


@dataclass(frozen=True)
class SshTarget:
    """Everything needed to reach one host (built from an ``ssh`` or ``slurm`` host)."""

    name: str
    host: str
    port: int | None = None
    user: str | None = None
    proxy_jump: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    config_file: str | None = None
    connect_timeout_s: float = 10.0
    keepalive_s: float = 15.0
    max_sessions: int = 4
    connect_attempts: int = 3

    @classmethod
    def from_config(cls, name: str, host: SshOptions) -> SshTarget:
        return cls(
            name=name,
            host=host.ssh,
            port=host.port,
            user=host.user,
            proxy_jump=host.proxy_jump,
            identity_file=host.identity_file,
            known_hosts=host.known_hosts,
            config_file=host.ssh_config_file,
            connect_timeout_s=host.connect_timeout_s,
            keepalive_s=host.keepalive_s,
            max_sessions=host.max_sessions,
        )

    def hop(self, spec: str) -> SshTarget:
        """A jump host written as ``[user@]host[:port]``, with this target's options."""
        user, _, hostport = spec.rpartition("@")
        host, _, port = hostport.partition(":")
        return SshTarget(
            name=f"{self.name}/jump:{spec}",
            host=host,
            port=int(port) if port else None,
            user=user or None,
            identity_file=self.identity_file,
            known_hosts=self.known_hosts,
            config_file=self.config_file,
            connect_timeout_s=self.connect_timeout_s,
            keepalive_s=self.keepalive_s,
        )

    def options(self) -> dict[str, Any]:
        opts: dict[str, Any] = {
            "connect_timeout": self.connect_timeout_s,
            "login_timeout": self.connect_timeout_s,
            "keepalive_interval": self.keepalive_s,
            "keepalive_count_max": 3,
        }
        if self.port is not None:
            opts["port"] = self.port
        if self.user is not None:
            opts["username"] = self.user
        if self.identity_file is not None:
            opts["client_keys"] = [os.path.expanduser(self.identity_file)]
        if self.known_hosts is not None:
            opts["known_hosts"] = os.path.expanduser(self.known_hosts)
        if self.config_file is not None:
            opts["config"] = [os.path.expanduser(self.config_file)]
        if not config_names_ciphers(self.config_file, self.host, self.port, self.user):
            opts["encryption_algs"] = list(PREFERRED_CIPHERS)
        return opts


@dataclass(frozen=True)
class RemoteResult:
    exit_code: int
    stdout: str
    stderr: str


class RemoteProcess:
    """A process started by :meth:`SshPool.start`: :meth:`finish` or :meth:`close` it, once."""

    def __init__(
        self,
        host: str,
        program: str,
        proc: asyncssh.SSHClientProcess[Any],
        release: Callable[[], None],
    ) -> None:
        self._host = host
        self._program = program
        self._proc = proc
        self._release: Callable[[], None] | None = release

    async def finish(self, input: str, timeout_s: float = 120.0) -> RemoteResult:
        """Write ``input``, close stdin, wait for the exit (its code is the caller's to judge)."""
        try:
            try:
                self._proc.stdin.write(input)
                self._proc.stdin.write_eof()
            except (OSError, asyncssh.Error, BrokenPipeError):
                pass  # it exited already; its exit status says why
            try:
                res = await self._proc.wait(check=False, timeout=timeout_s)
            except asyncssh.TimeoutError:
                self._proc.close()
                raise SshCommandError(f"{self._host}: `{self._program}` timed out") from None
            except (OSError, asyncssh.Error) as e:
                raise translate(e, f"ssh {self._host}") from None
        finally:
            self._done()
        code = res.exit_status if res.exit_status is not None else -1
        return RemoteResult(code, str(res.stdout or ""), str(res.stderr or ""))

    def close(self) -> None:
        """Abandon it: stdin closes without input, the channel is closed."""
        self._proc.close()
        self._done()

    def _done(self) -> None:
        if self._release is not None:
            self._release()
            self._release = None


def _connection_gone(e: asyncssh.ChannelOpenError) -> bool:
    """A session refused because its connection is closed (asyncssh's own refusal, not the
    host's): nothing reached the host."""
    return e.code == asyncssh.OPEN_CONNECT_FAILED and e.reason == "SSH connection closed"


def translate(e: BaseException, where: str) -> SshError:
    """Map an asyncssh/OS error to our tree (connection errors are the retryable kind)."""
    if isinstance(e, SshError):
        return e
    if isinstance(e, asyncssh.PermissionDenied):
        return SshAuthError(f"{where}: permission denied (is your key authorized?)")
    if isinstance(e, asyncssh.HostKeyNotVerifiable):
        return SshAuthError(f"{where}: host key not verifiable ({e.reason})")
    if isinstance(e, asyncssh.DisconnectError | asyncssh.ConnectionLost):
        return SshConnectError(f"{where}: connection lost ({e.reason})")
    if isinstance(e, asyncssh.ChannelOpenError):
        return SshConnectError(f"{where}: channel refused ({e.reason})")
    if isinstance(e, TimeoutError | asyncio.TimeoutError):
        return SshConnectError(f"{where}: connection timed out")
    if isinstance(e, OSError):
        return SshConnectError(f"{where}: {e.strerror or e}")
    if isinstance(e, asyncssh.Error):
        return SshError(f"{where}: {e.reason}")
    return SshError(f"{where}: {e}")


PART_REMOVE_TIMEOUT_S = 10.0


async def _remove_quietly(conn: asyncssh.SSHClientConnection, path: str) -> None:
    """Remove a partial upload on a fresh SFTP session (the cancelled one may be mid-write)."""
    try:
        async with asyncio.timeout(PART_REMOVE_TIMEOUT_S), conn.start_sftp_client() as sftp:
            await sftp.remove(path)
    except (OSError, asyncssh.Error, TimeoutError):
        pass  # not created yet, or the connection is gone (then so is the writer)


@dataclass
class _HostState:
    conn: asyncssh.SSHClientConnection | None = None
    hops: list[asyncssh.SSHClientConnection] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    sessions: asyncio.Semaphore | None = None
    forwards: dict[tuple[str, int], asyncssh.SSHListener] = field(default_factory=dict)
    # What a backend learned over this connection (the shim's dir and token, by configured
    # shim dir), kept while it lives: the `tcl serve` daemon's submits each make a backend.
    facts: dict[str, tuple[str, str]] = field(default_factory=dict)


class SshPool:
    """Pooled connections keyed by target name. Use one pool per event loop."""

    def __init__(self) -> None:
        self._hosts: dict[str, _HostState] = {}
        self.connects = 0  # how many connections were opened (tests, benchmarks)

    def _state(self, target: SshTarget) -> _HostState:
        st = self._hosts.get(target.name)
        if st is None:
            st = self._hosts[target.name] = _HostState()
            st.sessions = asyncio.Semaphore(target.max_sessions)
        return st

    async def _open(self, target: SshTarget) -> tuple[asyncssh.SSHClientConnection, list[Any]]:
        hops: list[asyncssh.SSHClientConnection] = []
        tunnel: asyncssh.SSHClientConnection | None = None
        try:
            for spec in [s for s in (target.proxy_jump or "").split(",") if s.strip()]:
                hop = target.hop(spec.strip())
                tunnel = await asyncssh.connect(hop.host, tunnel=tunnel, **await _options(hop))
                hops.append(tunnel)
            conn = await asyncssh.connect(target.host, tunnel=tunnel, **await _options(target))
        except BaseException:
            for h in reversed(hops):
                h.close()
            raise
        self.connects += 1
        return conn, hops

    async def connection(self, target: SshTarget) -> asyncssh.SSHClientConnection:
        """The live connection to ``target``, connecting (with backoff) when needed."""
        st = self._state(target)
        async with st.lock:
            if st.conn is not None and not st.conn.is_closed():
                return st.conn
            self._drop(st)
            last: SshError | None = None
            for attempt in range(target.connect_attempts):
                if attempt:
                    await asyncio.sleep(backoff_s(attempt - 1))
                try:
                    st.conn, st.hops = await self._open(target)
                    return st.conn
                except (OSError, asyncssh.Error, TimeoutError) as e:
                    last = translate(e, f"ssh {target.name}")
                    if not isinstance(last, SshConnectError):
                        raise last from None
            assert last is not None
            raise last

    def _drop(self, st: _HostState) -> None:
        st.facts.clear()
        for listener in st.forwards.values():
            listener.close()
        st.forwards.clear()
        for c in [st.conn, *reversed(st.hops)]:
            if c is not None:
                c.close()
        st.conn, st.hops = None, []

    def facts(self, target: SshTarget) -> dict[str, tuple[str, str]]:
        """What backends learned over ``target``'s connection; emptied when it drops."""
        return self._state(target).facts

    def forget_facts(self, name: str) -> None:
        st = self._hosts.get(name)
        if st is not None:
            st.facts.clear()

    async def _create_process(
        self, target: SshTarget, command: str, input: str | None = None
    ) -> asyncssh.SSHClientProcess[str]:
        """Open a session for ``command`` on the live connection, or on a new one when the
        connection turns out to be gone before the session opened (cut, its close not yet
        seen): the command never started on the host, so opening it again is safe."""
        conn = await self.connection(target)
        try:
            return await conn.create_process(command, input=input)
        except asyncssh.ChannelOpenError as e:
            if not _connection_gone(e):
                raise
        st = self._state(target)
        async with st.lock:
            if st.conn is conn:
                self._drop(st)
        conn = await self.connection(target)
        return await conn.create_process(command, input=input)

    async def run(
        self,
        target: SshTarget,
        argv: list[str],
        *,
        input: str | None = None,
        check: bool = True,
        timeout_s: float | None = 120.0,
    ) -> RemoteResult:
        """Run ``argv`` (quoted, never a shell string from user input) on the host."""
        st = self._state(target)
        command = shlex.join(argv)
        await self.connection(target)  # sessions is set with the first connection
        assert st.sessions is not None
        async with st.sessions:
            try:
                proc = await self._create_process(target, command, input)
                try:
                    res = await proc.wait(check=False, timeout=timeout_s)
                except BaseException:
                    # cancelled (a sibling's long-poll answered first) or timed out: close the
                    # channel now, not when the remote command ends (sshd counts open channels
                    # against its MaxSessions)
                    proc.close()
                    raise
            except asyncssh.TimeoutError:
                raise SshCommandError(f"{target.name}: `{argv[0]}` timed out") from None
            except (OSError, asyncssh.Error) as e:
                raise translate(e, f"ssh {target.name}") from None
        if res.exit_status is None and res.exit_signal is None:
            # the channel closed with neither an exit status nor a signal: the connection
            # dropped under the command (asyncssh returns instead of raising)
            raise SshConnectError(f"ssh {target.name}: connection lost during `{argv[0]}`")
        code = res.exit_status if res.exit_status is not None else -1
        out = str(res.stdout or "")
        err = str(res.stderr or "")
        if check and code != 0:
            tail = err.strip().splitlines()[-3:]
            raise SshCommandError(
                f"{target.name}: `{argv[0]}` exited {code}: {' / '.join(tail)}", code, err
            )
        return RemoteResult(code, out, err)

    async def start(self, target: SshTarget, argv: list[str]) -> RemoteProcess:
        """Start ``argv`` on the host now; feed its input later (:meth:`RemoteProcess.finish`).

        Starting a remote process costs a shell and an interpreter start-up on the host; a
        caller that knows the command before it knows the input hides that behind other waits.
        The process holds one of the host's ``max_sessions`` until it is finished or closed.
        """
        st = self._state(target)
        await self.connection(target)
        assert st.sessions is not None
        await st.sessions.acquire()
        try:
            proc = await self._create_process(target, shlex.join(argv))
        except (OSError, asyncssh.Error) as e:
            st.sessions.release()
            raise translate(e, f"ssh {target.name}") from None
        except BaseException:  # cancelled: give the session back
            st.sessions.release()
            raise
        return RemoteProcess(target.name, argv[0], proc, st.sessions.release)

    async def forward(
        self, target: SshTarget, remote_port: int, remote_host: str = "127.0.0.1"
    ) -> int:
        """A local port forwarded to ``remote_host:remote_port`` on the host (reused)."""
        conn = await self.connection(target)
        st = self._state(target)
        key = (remote_host, remote_port)
        listener = st.forwards.get(key)
        if listener is not None:
            return int(listener.get_port())
        try:
            listener = await conn.forward_local_port("127.0.0.1", 0, remote_host, remote_port)
        except (OSError, asyncssh.Error) as e:
            raise translate(e, f"ssh {target.name} forward :{remote_port}") from None
        st.forwards[key] = listener
        return int(listener.get_port())

    async def put_file(
        self,
        target: SshTarget,
        local: Path,
        remote: str,
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """Upload ``local`` to ``remote`` (atomically: a temporary name, then rename)."""
        await self._upload(target, local, remote, progress, only_if_missing=False)

    async def ensure_file(
        self,
        target: SshTarget,
        local: Path,
        remote: str,
        progress: Callable[[int, int], None] | None = None,
    ) -> bool:
        """Upload ``local`` to ``remote`` unless it exists (one SFTP session, parent made as
        needed, atomic like :meth:`put_file`); return whether it was uploaded. A file found is
        touched: its mtime says when it was last used (the SLURM release's code eviction spares
        a tarball a starting run just found)."""
        return await self._upload(target, local, remote, progress, only_if_missing=True)

    async def _upload(
        self,
        target: SshTarget,
        local: Path,
        remote: str,
        progress: Callable[[int, int], None] | None,
        *,
        only_if_missing: bool,
    ) -> bool:
        conn = await self.connection(target)
        st = self._state(target)
        assert st.sessions is not None
        # unique per upload: one process (the `tcl serve` daemon) may upload the same file twice
        tmp = f"{remote}.part-{os.getpid()}-{secrets.token_hex(4)}"
        handler = None
        if progress is not None:

            def handler(_src: bytes, _dst: bytes, done: int, total: int) -> None:
                progress(done, total)

        async with st.sessions:
            try:
                async with conn.start_sftp_client() as sftp:
                    if only_if_missing:
                        if await sftp.exists(remote):
                            with contextlib.suppress(asyncssh.SFTPError):  # not ours to touch
                                await sftp.utime(remote)
                            return False
                        await sftp.makedirs(posixpath.dirname(remote), exist_ok=True)
                    try:
                        await sftp.put(str(local), tmp, progress_handler=handler)
                        await sftp.posix_rename(tmp, remote)
                    except BaseException:
                        # Ctrl-C (a cancel) or a failure mid-way: leave no partial file there
                        await asyncio.shield(_remove_quietly(conn, tmp))
                        raise
                    return True
            except (OSError, asyncssh.Error) as e:
                raise translate(e, f"ssh {target.name} upload") from None

    async def disconnect(self, target: SshTarget) -> None:
        st = self._hosts.get(target.name)
        if st is not None:
            async with st.lock:
                self._drop(st)

    async def close(self) -> None:
        for st in self._hosts.values():
            self._drop(st)
        self._hosts.clear()
