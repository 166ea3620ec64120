"""The process executor's side of the runner fork server (``tcl-runner forkserver``).

One server per shim, started with the shim (``open``) in its own session with the job's base
environment (an allow-list of the shim's), a pipe on its stdin and one on its stdout. A task's
runner is then a fork of it (``fork``): no Python start, a few milliseconds of CPU. Requests are
one at a time (a lock), each answered by the forked wrapper's pid. A server that died is started
again for the next request (one that dies as a request is written: that task starts cold); one
that does not answer within ``REPLY_TIMEOUT_S`` is killed and the start fails (never a second
runner for one task). Closing
the pipe (``close``, or the shim dying) ends the server; the runners it forked live on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psutil

from tcl.agentenv import job_base_env
from tcl.common.api import ForkRequest
from tcl.shim.errors import ContainerError

log = logging.getLogger(__name__)

REPLY_TIMEOUT_S = 60.0  # the server still importing on a loaded host takes seconds, not this
FORKSERVER_ARG = "forkserver"


@dataclass(frozen=True)
class Forked:
    pid: int
    create_time: float | None


class RunnerForkServer:
    def __init__(self, runner_argv: list[str], instance_id: str, log_file: Path) -> None:
        self.argv = [*runner_argv, FORKSERVER_ARG, "--tcl-instance", instance_id]
        self._log_file = log_file
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = asyncio.Lock()
        self.forks = 0  # runners forked in all (tests and benchmarks read it)
        self.starts = 0  # servers started in all

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def start(self) -> None:
        async with self._lock:
            await asyncio.to_thread(self._ensure)

    async def fork(self, req: ForkRequest) -> Forked | None:
        """A runner for the task, forked; None when the server is gone (start it cold)."""
        async with self._lock:
            return await asyncio.to_thread(self._fork, req)

    def _ensure(self) -> subprocess.Popen[bytes]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        self._log_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self._log_file, "ab") as err:
            self._proc = subprocess.Popen(
                self.argv,
                env=job_base_env(os.environ),
                cwd=self._log_file.parent,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
            )
        self.starts += 1
        return self._proc

    def _fork(self, req: ForkRequest) -> Forked | None:
        try:
            proc = self._ensure()
        except OSError as e:
            log.warning("cannot start the runner fork server: %s", e)
            return None
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(req.model_dump_json().encode() + b"\n")
            proc.stdin.flush()
        except OSError:  # it died since: this task starts cold, the next one restarts it
            self._kill()
            return None
        ready, _, _ = select.select([proc.stdout], [], [], REPLY_TIMEOUT_S)
        if not ready:
            self._kill()
            raise ContainerError(f"the runner fork server did not answer in {REPLY_TIMEOUT_S:g} s")
        reply = proc.stdout.readline().decode(errors="replace").strip()
        if not reply:  # it died reading the request: whether it forked is unknown, so fail
            self._kill()
            raise ContainerError("the runner fork server exited while starting the runner")
        if not reply.isdigit():
            raise ContainerError(f"the runner fork server refused the task: {reply}")
        pid = int(reply)
        self.forks += 1
        try:
            created: float | None = psutil.Process(pid).create_time()
        except psutil.Error:  # it exited already: observe reads its exit code
            created = None
        return Forked(pid, created)

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        for pipe in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)

    async def close(self) -> None:
        """End the server (end of file on its stdin, then its group killed): the runners it
        forked are in sessions of their own and run on."""
        async with self._lock:
            proc = self._proc
            if proc is not None and proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            await asyncio.to_thread(self._kill)
