"""Warm runners: wrappers and runners started before their task, so a submit does not wait for a
Python start (a runner's is ~0.2 s on an idle core, seconds when several start on a busy host).

Each member is ``procwrap.py --warm`` with ``tcl-runner warm`` under it, started with a pipe on
its stdin, in its own session, with the job's base environment (an allow-list of the shim's).
It holds no accelerator and no task: the task's cgroup, dir, log, environment and token reach it
in the bind line (``procwrap.bind_message``) when the executor hands it a task. A member is used
once; the pool starts another in the background. Members older than ``max_age_s`` are ended and
replaced (a long-idle one may predate an upgrade of what it imported). Closing the pool (or the
shim dying) closes the pipes: an unbound member reads end of file and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import psutil

from tcl.agentenv import job_base_env
from tcl.shim.executors.procwrap import WARM_FLAG

log = logging.getLogger(__name__)

DEFAULT_SIZE = 2
DEFAULT_MAX_AGE_S = 3600.0


@dataclass
class WarmRunner:
    proc: subprocess.Popen[bytes]
    create_time: float | None  # the wrapper's, as psutil reports it (the handle's pid check)
    born: float  # monotonic

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def bind(self, line: bytes) -> bool:
        """Hand it its task; False when it is gone (the caller starts a cold one)."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.close()
        except (BrokenPipeError, ValueError, OSError):
            return False
        return True

    def discard(self) -> None:
        """End an unbound member: end of file on its stdin, and its group killed."""
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)


class WarmPool:
    """Up to ``size`` started, unbound runners of one shim instance (0: none, every start is
    cold)."""

    def __init__(
        self,
        wrapper: str,
        runner_argv: list[str],
        instance_id: str,
        log_file: Path,
        size: int = DEFAULT_SIZE,
        max_age_s: float = DEFAULT_MAX_AGE_S,
    ) -> None:
        self._argv = [
            sys.executable,
            "-I",
            "-S",
            wrapper,
            WARM_FLAG,
            "--tcl-instance",
            instance_id,
            "--",
            *runner_argv,
            "warm",
        ]
        self.size = size
        self.max_age_s = max_age_s
        self._log_file = log_file
        self._ready: deque[WarmRunner] = deque()
        self._filling: asyncio.Task[None] | None = None
        self._closed = False
        self.started = 0  # members started in all (tests and benchmarks read it)

    def __len__(self) -> int:
        return len(self._ready)

    def take(self) -> WarmRunner | None:
        """The oldest live member young enough to use, or None; a refill starts either way."""
        found: WarmRunner | None = None
        now = time.monotonic()
        while self._ready and found is None:
            member = self._ready.popleft()
            if member.alive() and now - member.born < self.max_age_s:
                found = member
            else:
                member.discard()
        self.refill()
        return found

    def refill(self) -> None:
        """Start members up to ``size`` in the background (one filler at a time)."""
        if self._closed or self.size <= 0:
            return
        if self._filling is None or self._filling.done():
            self._filling = asyncio.get_running_loop().create_task(self._fill(), name="warm-fill")

    async def _fill(self) -> None:
        while not self._closed and len(self._ready) < self.size:
            try:
                member = await asyncio.to_thread(self._spawn)
            except OSError as e:  # no more processes, a missing runner: cold starts still work
                log.warning("cannot start a warm runner: %s", e)
                return
            if self._closed:
                await asyncio.to_thread(member.discard)
                return
            self._ready.append(member)

    def _spawn(self) -> WarmRunner:
        self._log_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(self._log_file, "ab") as err:
            proc = subprocess.Popen(
                self._argv,
                env=job_base_env(os.environ),
                cwd=self._log_file.parent,
                stdin=subprocess.PIPE,
                stdout=err,
                stderr=err,
                start_new_session=True,
            )
        self.started += 1
        try:
            created: float | None = psutil.Process(proc.pid).create_time()
        except psutil.Error:
            created = None
        return WarmRunner(proc, created, time.monotonic())

    async def close(self) -> None:
        self._closed = True
        if self._filling is not None:  # it ends after the member it is starting (discarded)
            with contextlib.suppress(asyncio.CancelledError):
                await self._filling
        members = list(self._ready)
        self._ready.clear()
        for member in members:
            await asyncio.to_thread(member.discard)
