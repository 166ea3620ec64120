"""The ``ssh`` backend: the host's shim and each runner through forwards of one SSH connection.

Code goes to a content-addressed cache on the host (``<shim_dir>/code/<sha256>.tar.gz``) once;
each runner then receives it from the host's loopback, so a re-submit of the same tree sends
no code over the network. A runner whose host already has the tree extracted (the shim's
``code-cache``, see ``tcl.runner.codecache``) copies it from there: no upload, no extraction.
"""

from __future__ import annotations

from tcl.control.agents import RunnerApi, ShimApi
from tcl.control.backends.base import Backend, Progress, SshEndpoint
from tcl.control.config import SshHost
from tcl.control.errors import AgentError
from tcl.control.httpagents import HttpRunner, HttpShim
from tcl.control.shipping import Snapshot
from tcl.control.ssh import SshPool, SshTarget
from tcl.shim.api import ExecutorKind

# Runs on the host (stdin of `python3 -`): have the runner take the tree from the host's code
# cache (no upload, no extraction); else stream the cached tarball into its PUT /code; exit 3
# when the host has neither (one round trip when it has either).
_HOST_PUT = r"""
import json, os, sys, urllib.error, urllib.request
path, port, sha = sys.argv[1], sys.argv[2], sys.argv[3]
base = f"http://127.0.0.1:{port}/api/code"
req = urllib.request.Request(f"{base}/cached", data=json.dumps({"sha256": sha}).encode(),
                             method="POST", headers={"Content-Type": "application/json"})
try:
    urllib.request.urlopen(req, timeout=600).read()
    sys.exit(0)
except urllib.error.HTTPError as e:
    if e.code not in (404, 405):  # 405: a runner from before the code cache
        sys.exit(f"runner refused the cached code: {e.code} {e.read()[:300]!r}")
if not os.path.isfile(path):
    sys.exit(3)
with open(path, "rb") as f:
    req = urllib.request.Request(
        base, data=f, method="PUT",
        headers={"X-Code-Sha256": sha, "Content-Length": str(os.fstat(f.fileno()).st_size),
                 "Content-Type": "application/gzip"})
    try:
        urllib.request.urlopen(req, timeout=600).read()
    except urllib.error.HTTPError as e:
        sys.exit(f"runner refused the code: {e.code} {e.read()[:300]!r}")
"""


# `sh -c SCRIPT sh SHIM_DIR`: print the shim dir with ~ resolved, then the token (one round trip).
_DIR_AND_TOKEN = 'd="$1"; case "$d" in "~"*) d="$HOME${d#"~"}";; esac; echo "$d"; cat "$d/token"'


class SshBackend(Backend):
    kind = "ssh"

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

    async def shim_dir(self) -> str:
        """The shim directory on the host, with ``~`` resolved."""
        if self._shim_dir is None:
            await self._dir_and_token()
        assert self._shim_dir is not None
        return self._shim_dir

    async def _dir_and_token(self) -> None:
        res = await self.pool.run(
            self.target, ["sh", "-c", _DIR_AND_TOKEN, "sh", self.cfg.shim_dir], check=False
        )
        lines = res.stdout.splitlines()
        if lines:
            self._shim_dir = lines[0]
        self._token = lines[1].strip() if res.exit_code == 0 and len(lines) > 1 else None

    def forget_token(self) -> None:
        """Read the token again on next use (``tcl host setup`` may have made a new one)."""
        self._token = None

    async def shim(self) -> ShimApi:
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
        self._shim = HttpShim(f"http://127.0.0.1:{port}", self._token, name=f"shim {self.name}")
        self._shim_port = port
        return self._shim

    async def runner(self, runner_port: int, label: str) -> RunnerApi:
        port = await self.pool.forward(self.target, runner_port)
        return HttpRunner(f"http://127.0.0.1:{port}", name=f"runner {label}@{self.name}")

    async def ship_code(
        self, snap: Snapshot, runner_port: int, runner: RunnerApi, progress: Progress | None
    ) -> int:
        d = await self.shim_dir()
        remote = f"{d}/code/{snap.sha256}.tar.gz"
        argv = [self.cfg.python, "-", remote, str(runner_port), snap.sha256]
        put = await self.pool.run(self.target, argv, input=_HOST_PUT, check=False)
        if put.exit_code == 0:
            if progress is not None:
                progress(snap.size, snap.size)
            return 0
        if put.exit_code != 3:
            raise AgentError(f"{self.name}: code hand-over failed: {put.stderr.strip()[-300:]}")
        await self.pool.run(self.target, ["mkdir", "-p", f"{d}/code"])
        await self.pool.put_file(self.target, snap.tarball, remote, progress)
        await self.pool.run(self.target, argv, input=_HOST_PUT)
        return snap.size

    def ssh_endpoint(self, task_ssh_port: int) -> SshEndpoint | None:
        t = self.target
        return SshEndpoint(
            host=t.host, port=t.port, user=t.user, identity_file=t.identity_file,
            known_hosts=t.known_hosts, proxy_jump=t.proxy_jump, container_port=task_ssh_port,
        )  # fmt: skip

    async def reset(self) -> None:
        if self._shim is not None:
            await self._shim.aclose()
        self._shim, self._shim_port = None, None
        await self.pool.disconnect(self.target)

    async def aclose(self) -> None:
        if self._shim is not None:
            await self._shim.aclose()
            self._shim = None
