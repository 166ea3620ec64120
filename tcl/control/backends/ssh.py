"""The ``ssh`` backend: the host's shim and each runner through forwards of one SSH connection.

Code goes to a content-addressed cache on the host (``<shim_dir>/code/<sha256>.tar.gz``) once;
each runner then receives it from the host's loopback, so a re-submit of the same tree sends
no code over the network. A runner whose host already has the tree extracted (the shim's
``code-cache``, see ``tcl.runner.codecache``) copies it from there: no upload, no extraction.
The upload to the host's cache and the hand-over process start while the task's container
starts (:meth:`SshBackend.prestage_code`); once the runner is up only its port is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from importlib import resources

from tcl.control.backends.base import Progress, SshEndpoint
from tcl.control.backends.shim import ShimBackend
from tcl.control.backends.shimhost import ShimHost
from tcl.control.config import SshHost
from tcl.control.errors import AgentError
from tcl.control.placement import LocalPlacement, SshPlacement
from tcl.control.shipping import Snapshot
from tcl.control.transport.agents import RunnerApi, ShimApi
from tcl.control.transport.httpagents import HttpRunner, HttpShim
from tcl.control.transport.ssh import RemoteProcess, SshPool, SshTarget
from tcl.shim.api import ExecutorKind

# Runs on the host (`python -c SCRIPT TARBALL SHA256`), "PORT TOKEN" on stdin (the runner's
# bearer token never reaches a command line): have the runner take the tree from the host's code
# cache (no upload, no extraction); else stream the cached tarball into its PUT /code; exit 3
# when the host has neither. The port arrives once the runner is up, so the process starts
# (shell, interpreter, imports) while the container starts; no port (stdin closed empty) means
# the submit gave up: exit 4. A standard-library program, see its docstring.
_HOST_PUT = (
    resources.files("tcl.control.backends.ssh_scripts")
    .joinpath("host_put.py")
    .read_text(encoding="utf-8")
)


# `sh -c SCRIPT sh SHIM_DIR`: print the shim dir with ~ resolved, then the token (one round trip).
_DIR_AND_TOKEN = 'd="$1"; case "$d" in "~"*) d="$HOME${d#"~"}";; esac; echo "$d"; cat "$d/token"'


@dataclass
class _Staged:
    """A code hand-over under way: the upload to the host's cache, the waiting process."""

    upload: asyncio.Task[int]
    handover: asyncio.Task[RemoteProcess]

    async def aclose(self) -> None:
        self.upload.cancel()
        self.handover.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.upload
        with contextlib.suppress(asyncio.CancelledError, Exception):
            (await self.handover).close()


class SshShimHost(ShimHost):
    def __init__(self, name: str, cfg: SshHost, pool: SshPool) -> None:
        self.name = name
        self.cfg = cfg
        self.pool = pool
        self.target = SshTarget.from_config(name, cfg)
        self.executor = ExecutorKind(cfg.executor)
        self._shim: HttpShim | None = None
        self._shim_port: int | None = None
        self._token: str | None = None
        self._shim_dir: str | None = None
        self._staged: dict[str, _Staged] = {}  # by code sha256
        self._shim_lock = asyncio.Lock()

    async def shim_dir(self) -> str:
        """The shim directory on the host, with ``~`` resolved."""
        if self._shim_dir is None:
            await self._dir_and_token()
        assert self._shim_dir is not None
        return self._shim_dir

    async def _dir_and_token(self) -> None:
        known = self.pool.facts(self.target).get(self.cfg.shim_dir)  # an earlier submit's
        if known is not None:
            self._shim_dir, self._token = known
            return
        res = await self.pool.run(
            self.target, ["sh", "-c", _DIR_AND_TOKEN, "sh", self.cfg.shim_dir], check=False
        )
        lines = res.stdout.splitlines()
        if lines:
            self._shim_dir = lines[0]
        self._token = lines[1].strip() if res.exit_code == 0 and len(lines) > 1 else None
        if self._shim_dir is not None and self._token is not None:
            self.pool.facts(self.target)[self.cfg.shim_dir] = (self._shim_dir, self._token)

    def forget_token(self) -> None:
        """Read the token again on next use (``tcl host setup`` may have made a new one)."""
        self._token = None
        self.pool.facts(self.target).pop(self.cfg.shim_dir, None)

    async def shim(self) -> ShimApi:
        # One at a time: concurrent callers (`tcl ps` refreshing many runs, the daemon's
        # submits) would each make a client and close the one another caller is using.
        async with self._shim_lock:
            return await self._shim_locked()

    async def _shim_locked(self) -> ShimApi:
        port = await self.pool.forward(self.target, self.cfg.shim_port)
        if self._shim is not None and port == self._shim_port:
            return self._shim
        if self._token is None:
            await self._dir_and_token()
        if self._token is None:
            raise AgentError(
                f"{self.name}: no shim installed (no {self._shim_dir}/token); "
                f"run `tcl host setup {self.name}`"
            )
        if self._shim is not None:
            await self._shim.aclose()
        self._shim = HttpShim(
            f"http://127.0.0.1:{port}",
            self._token,
            name=f"shim {self.name}",
            unreachable_hint=(
                f"the shim on {self.name} does not answer (not running?): "
                f"run `tcl host setup {self.name}`"
            ),
            on_unauthorized=self._forget_shim,
        )
        self._shim_port = port
        return self._shim

    def _forget_shim(self) -> None:
        """The shim refused our token: read it again and make a new client on next use."""
        self.forget_token()
        self._shim_port = None

    def peer_address(self) -> str:
        return self.target.host

    async def runner(self, runner_port: int, token: str, label: str) -> RunnerApi:
        port = await self.pool.forward(self.target, runner_port)
        return HttpRunner(f"http://127.0.0.1:{port}", token, name=f"runner {label}@{self.name}")

    def _handover_argv(self, shim_dir: str, snap: Snapshot) -> list[str]:
        remote = f"{shim_dir}/code/{snap.sha256}.tar.gz"
        return [self._venv_python(shim_dir), "-c", _HOST_PUT, remote, snap.sha256]

    def _venv_python(self, shim_dir: str) -> str:
        """The shim venv's interpreter: the shim runs from it, so it exists, and unlike a
        ``python3`` found on PATH it is never a version-manager wrapper (pyenv's costs a few
        hundred ms per start)."""
        venv = self.cfg.shim_venv
        if venv is None:
            return f"{shim_dir}/venv/bin/python"
        return f"{venv}/bin/python" if venv.startswith("/") else self.cfg.python

    def prestage_code(self, snap: Snapshot, progress: Progress | None = None) -> None:
        """Get the tarball into the host's cache and start the hand-over process, now.

        Both cost remote start-ups (a shell per channel, an interpreter: 0.2-1 s on a loaded
        host or one with a heavy ``.bashrc``); started here they overlap the container's start
        instead of following it. :meth:`ship_code` then only sends the runner's port.
        """
        if snap.sha256 not in self._staged:
            self._staged[snap.sha256] = _Staged(
                upload=asyncio.create_task(self._upload(snap, progress)),
                handover=asyncio.create_task(self._start_handover(snap)),
            )

    async def _upload(self, snap: Snapshot, progress: Progress | None) -> int:
        """Bytes sent to put the tarball in the host's cache (0 when it is there already)."""
        remote = f"{await self.shim_dir()}/code/{snap.sha256}.tar.gz"
        sent = await self.pool.ensure_file(self.target, snap.tarball, remote, progress)
        if progress is not None and not sent:
            progress(snap.size, snap.size)
        return snap.size if sent else 0

    async def _start_handover(self, snap: Snapshot) -> RemoteProcess:
        return await self.pool.start(self.target, self._handover_argv(await self.shim_dir(), snap))

    async def ship_code(
        self,
        snap: Snapshot,
        runner_port: int,
        runner_token: str,
        runner: RunnerApi,
        progress: Progress | None,
        *,
        cache_checked: bool = False,
    ) -> int:
        self.prestage_code(snap, progress)  # no-op when submit did it already
        staged = self._staged.pop(snap.sha256)
        # A host that has the tree extracted already (any earlier run of this code) needs one
        # request over the open forward: no hand-over process, no wait for the upload check.
        try:
            cached = not cache_checked and await runner.use_cached_code(snap.sha256)
        except BaseException:
            await staged.aclose()
            raise
        if cached:
            await staged.aclose()
            if progress is not None:
                progress(snap.size, snap.size)
            return 0
        try:
            sent = await staged.upload
            proc = await staged.handover
        except BaseException:
            await staged.aclose()
            raise
        put = await proc.finish(f"{runner_port} {runner_token}\n")
        if put.exit_code != 0:
            raise AgentError(f"{self.name}: code hand-over failed: {put.stderr.strip()[-300:]}")
        return sent

    def placement(self) -> SshPlacement:
        c = self.cfg
        return SshPlacement(
            ssh=c.ssh,
            port=c.port,
            user=c.user,
            identity_file=c.identity_file,
            known_hosts=c.known_hosts,
            proxy_jump=c.proxy_jump,
            ssh_config_file=c.ssh_config_file,
            shim_dir=self._shim_dir or c.shim_dir,
            shim_port=c.shim_port,
            shim_venv=c.shim_venv,
            executor=c.executor,
        )

    def ssh_endpoint(self, task_ssh_port: int) -> SshEndpoint | None:
        t = self.target
        return SshEndpoint(
            host=t.host,
            port=t.port,
            user=t.user,
            identity_file=t.identity_file,
            known_hosts=t.known_hosts,
            proxy_jump=t.proxy_jump,
            container_port=task_ssh_port,
            ssh_config_file=self.cfg.ssh_config_file,
        )

    async def code_cached(self, snap: Snapshot, progress: Progress | None) -> None:
        staged = self._staged.pop(snap.sha256, None)
        if staged is not None:
            await staged.aclose()
        await super().code_cached(snap, progress)

    async def discard_staged(self) -> None:
        await self._drop_staged()

    async def _drop_staged(self) -> None:
        staged, self._staged = list(self._staged.values()), {}
        for st in staged:
            await st.aclose()

    async def reset(self) -> None:
        await self._drop_staged()
        old, self._shim, self._shim_port = self._shim, None, None
        if old is not None:
            await old.retire()  # closed once the calls in flight on it end
        await self.pool.disconnect(self.target)

    async def aclose(self) -> None:
        await self._drop_staged()
        if self._shim is not None:
            await self._shim.aclose()
            self._shim = None


class SshBackend(ShimBackend):
    kind = "ssh"

    def ssh_host(self, name: str) -> SshShimHost:
        h = self.host(name)
        assert isinstance(h, SshShimHost)
        return h

    def _make_host(self, name: str, record: LocalPlacement | SshPlacement | None) -> ShimHost:
        cfg = self.inputs.hosts.get(name)
        if isinstance(cfg, SshHost):
            return SshShimHost(name, cfg, self.inputs.ssh_pool())
        if isinstance(record, SshPlacement):  # a host renamed or removed since
            return SshShimHost(name, host_of_placement(record), self.inputs.ssh_pool())
        raise self.unknown_host(name)


def host_of_placement(r: SshPlacement) -> SshHost:
    """The host a placement record describes (its config line may be gone)."""
    return SshHost(
        type="ssh",
        ssh=r.ssh,
        port=r.port,
        user=r.user,
        proxy_jump=r.proxy_jump,
        identity_file=r.identity_file,
        known_hosts=r.known_hosts,
        ssh_config_file=r.ssh_config_file,
        shim_port=r.shim_port,
        shim_dir=r.shim_dir,
        shim_venv=r.shim_venv,
        executor=r.executor,
    )
