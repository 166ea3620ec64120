"""The process executor: the runner as a child process in its own session (no Docker needed).

Each task's runner runs under ``procwrap.py`` (pid + start time recorded in task.json), in a new
session so it outlives a shim that is killed, and with its accelerators handed over through
``CUDA_VISIBLE_DEVICES`` / ``TPU_VISIBLE_CHIPS``. It shares the host network: the runner binds
127.0.0.1 on a free port, reported as the task's runner port; there is no container sshd.
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
from collections.abc import Iterable
from pathlib import Path

import psutil

from tcl.agentenv import job_base_env
from tcl.atomic import write_atomic
from tcl.common import procwrap
from tcl.common.api import ForkRequest
from tcl.shim.api import SHELL_ENV_FILE, ExecutorKind, Ports
from tcl.shim.errors import BadRequest, ContainerError
from tcl.shim.executors.base import Launch, Liveness, Observed, ProgressFn, Started, accelerator_env
from tcl.shim.executors.cgroup import MARK_ENV, TaskProcesses
from tcl.shim.executors.forkclient import FORKSERVER_ARG, RunnerForkServer
from tcl.shim.executors.ports import free_port, listening
from tcl.shim.store import Handle

log = logging.getLogger(__name__)

WRAPPER = str(Path(procwrap.__file__))
EXIT_FILE = "exit_code"
# Wrappers the fork server made carry its command line, not their task's: each is recorded as
# ``<state-dir>/forked/<pid>`` = "<task id> <create time>", outside the task's dir (a task
# removed while its runner still exits must still be found, as an orphan, by the next shim).
FORKED_DIR = "forked"
LOG_FILE = "runner.log"
_STOP_POLL_S = 0.05
# a forked runner listens within milliseconds; past this (a host so loaded it did not) its task
# is reported running anyway and the launch asks its runner until it answers
LISTEN_WAIT_S = 2.0
_KILL_WAIT_S = 30.0  # after SIGKILL: a process stuck in the kernel must not hold the shim


class ProcessExecutor:
    kind = ExecutorKind.PROCESS

    def __init__(
        self,
        runner_argv: list[str],
        instance_id: str,
        tasks_dir: Path,
        code_cache: Path | None = None,
        processes: TaskProcesses | None = None,
        forkserver: RunnerForkServer | None = None,
    ) -> None:
        self._runner_argv = runner_argv
        # Every process of a task (cgroup or marker): ended when the task ends, daemons too.
        self.processes = processes or TaskProcesses.discover(instance_id)
        self._released: set[str] = set()
        self._code_cache = code_cache
        self._instance = instance_id
        self._tasks_dir = tasks_dir
        self._forked_dir = tasks_dir.parent / FORKED_DIR
        self._children: dict[int, subprocess.Popen[bytes]] = {}
        # starts per task: an observe that began before a start of its task (its scan in a
        # thread meanwhile) must not end the runner it never saw
        self._starts: dict[str, int] = {}  # task id: the number of its latest start
        self._start_seq = 0
        self.forkserver = forkserver  # None: every runner starts cold

    async def open(self) -> None:
        """Start the runner fork server."""
        if self.forkserver is not None:
            await self.forkserver.start()

    async def close(self) -> None:
        if self.forkserver is not None:
            await self.forkserver.close()

    async def prepare(self, launch: Launch, progress: ProgressFn) -> None:
        if launch.spec.mounts:
            raise BadRequest("mounts: the process executor runs on the host and mounts nothing")

    async def start(self, launch: Launch) -> Started:
        spec = launch.spec
        port = free_port()
        runner_dir = launch.task_dir / "runner"
        runner_dir.mkdir(exist_ok=True, mode=0o700)
        exit_file = launch.task_dir / EXIT_FILE
        exit_file.unlink(missing_ok=True)
        task_env = dict(spec.env)
        task_env.update(accelerator_env(launch))
        task_env["TCL_TASK_ID"] = spec.id
        task_env[MARK_ENV] = self.processes.mark(spec.id)
        self._released.discard(spec.id)
        self._start_seq += 1
        self._starts[spec.id] = self._start_seq
        cgroup = await asyncio.to_thread(self.processes.prepare, spec.id)
        serve = [
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--state-dir",
            str(runner_dir),
            "--token-file",
            str(launch.runner_token_file),
            # what `tcl ssh` on this host sources: the job's dir and env, never its secrets
            "--ssh-env-file",
            str(launch.task_dir / SHELL_ENV_FILE),
        ]
        if self._code_cache is not None:
            self._code_cache.mkdir(parents=True, exist_ok=True, mode=0o700)
            serve += ["--code-cache", str(self._code_cache)]
        if self.forkserver is not None:
            forked = await self.forkserver.fork(
                ForkRequest(
                    argv=serve,
                    env=task_env,
                    task_dir=str(launch.task_dir),
                    log_file=str(launch.task_dir / LOG_FILE),
                    exit_file=str(exit_file),
                    cgroup=str(cgroup) if cgroup is not None else None,
                )
            )
            if forked is not None:
                record = f"{spec.id} {forked.create_time or 0}\n".encode()
                await asyncio.to_thread(self._record_forked, forked.pid, record)
                handle = Handle(pid=forked.pid, pid_start_time=forked.create_time)
                await listening(port, forked.pid, LISTEN_WAIT_S)
                return Started(handle, Ports(runner=port))
        env = job_base_env(os.environ)  # an allow-list: nothing of the shim's own secrets
        env.update(task_env)
        argv = [
            sys.executable,
            "-I",
            "-S",
            WRAPPER,
            "--exit-file",
            str(exit_file),
            *(["--cgroup", str(cgroup)] if cgroup is not None else []),
            "--tcl-instance",
            self._instance,
            "--tcl-task",
            spec.id,
            "--",
            *self._runner_argv,
            *serve,
        ]
        proc, started_at = await asyncio.to_thread(self._spawn, argv, env, launch.task_dir)
        self._children[proc.pid] = proc
        return Started(Handle(pid=proc.pid, pid_start_time=started_at), Ports(runner=port))

    def _record_forked(self, pid: int, record: bytes) -> None:
        self._forked_dir.mkdir(mode=0o700, exist_ok=True)
        write_atomic(self._forked_dir / str(pid), record, 0o600)

    @staticmethod
    def _spawn(
        argv: list[str], env: dict[str, str], task_dir: Path
    ) -> tuple[subprocess.Popen[bytes], float | None]:
        try:
            with open(task_dir / LOG_FILE, "ab") as log_file:
                proc = subprocess.Popen(
                    argv,
                    env=env,
                    cwd=task_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as e:
            raise ContainerError(f"cannot start the runner: {e}") from e
        try:
            return proc, psutil.Process(proc.pid).create_time()
        except psutil.Error:
            return proc, None

    # -- observe ------------------------------------------------------------------------------
    async def observe(self, tasks: dict[str, Handle]) -> dict[str, Observed]:
        starts = {t: self._starts.get(t, 0) for t in tasks}
        # psutil's process list and the records: file reads, off the event loop
        found = (
            await asyncio.to_thread(self._scan)
            if any(h.pid is None for h in tasks.values())
            else {}
        )
        out: dict[str, Observed] = {}
        for task_id, handle in tasks.items():
            if handle.pid is None and task_id in found:
                handle = found[task_id]
                obs = self._observe_one(task_id, handle)
                obs.handle = handle
                out[task_id] = obs
            else:
                out[task_id] = self._observe_one(task_id, handle)
            if (
                out[task_id].liveness is not Liveness.ALIVE
                and self._starts.get(task_id, 0) == starts[task_id]
            ):
                # The runner is gone (killed, crashed): what it started must not outlive it
                # (unless the task was started again meanwhile: that runner is not gone).
                await self._release(task_id)
        return out

    async def _release(self, task_id: str) -> None:
        if task_id not in self._released:
            killed = await asyncio.to_thread(self.processes.release, task_id)
            if killed:
                log.info("task %s: ended %d process(es) its runner left behind", task_id, killed)
            self._released.add(task_id)

    async def end_job_leftovers(self, task_id: str, handle: Handle) -> int:
        """The job ended but the runner serves its logs on: end everything else of the task
        (daemons the job started), sparing the wrapper and the runner."""
        spare: set[int] = set()
        if handle.pid is not None:
            spare.add(handle.pid)
            with contextlib.suppress(psutil.Error):
                spare.update(c.pid for c in psutil.Process(handle.pid).children())
        return await asyncio.to_thread(self.processes.kill, task_id, spare)

    def _observe_one(self, task_id: str, handle: Handle) -> Observed:
        if handle.pid is None:
            return Observed(Liveness.MISSING, message="the runner process was never recorded")
        child = self._children.get(handle.pid)
        if child is not None:
            rc = child.poll()
            if rc is None:
                return Observed(Liveness.ALIVE)
            del self._children[handle.pid]
        elif self._alive(handle):
            return Observed(Liveness.ALIVE)
        code = self._exit_code(task_id)
        if code is None:
            return Observed(Liveness.MISSING, message="the runner process is gone")
        return Observed(Liveness.EXITED, exit_code=code)

    def _alive(self, handle: Handle) -> bool:
        assert handle.pid is not None
        try:
            p = psutil.Process(handle.pid)
            started = handle.pid_start_time
            if started is not None and abs(p.create_time() - started) > 1:
                return False  # the pid was reused by another process
            return p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def _exit_code(self, task_id: str) -> int | None:
        """The code the wrapper recorded (None: it never finished, e.g. killed with SIGKILL)."""
        try:
            return int((self._tasks_dir / task_id / EXIT_FILE).read_text().strip())
        except (OSError, ValueError):
            return None

    def _scan(self) -> dict[str, Handle]:
        """Wrapper processes of this shim instance, by task id: a cold one names its task on
        its command line; one forked by the fork server (whose command line it has) is named by
        its record in ``FORKED_DIR``."""
        found: dict[str, Handle] = {}
        forked: dict[int, float] = {}
        for p in psutil.process_iter(["pid", "cmdline", "create_time"]):
            cmd = p.info.get("cmdline") or []
            if "--tcl-instance" not in cmd or (WRAPPER not in cmd and FORKSERVER_ARG not in cmd):
                continue
            try:
                inst = cmd[cmd.index("--tcl-instance") + 1]
                task = cmd[cmd.index("--tcl-task") + 1] if "--tcl-task" in cmd else None
            except IndexError:
                continue
            if inst != self._instance:
                continue
            if task is not None:
                found[task] = Handle(pid=p.info["pid"], pid_start_time=p.info["create_time"])
            elif FORKSERVER_ARG in cmd:
                forked[p.info["pid"]] = p.info["create_time"]
        if forked:
            found.update(self._forked(forked))
        return found

    def _forked(self, forked: dict[int, float]) -> dict[str, Handle]:
        """The recorded forked wrappers still alive, by task id; the records of gone ones (a
        pid since reused by another fork is told apart by its start time) are deleted."""
        out: dict[str, Handle] = {}
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self._forked_dir):
                try:
                    pid = int(entry.name)
                    task, _, created = Path(entry.path).read_text().strip().partition(" ")
                    started = float(created or 0)
                except (OSError, ValueError):
                    continue
                if pid in forked and abs(forked[pid] - started) <= 1:
                    out[task] = Handle(pid=pid, pid_start_time=forked[pid])
                elif not self._alive(Handle(pid=pid, pid_start_time=started)):
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
        return out

    # -- stop / remove ------------------------------------------------------------------------
    async def stop(self, task_id: str, handle: Handle, timeout_s: float) -> int | None:
        if handle.pid is None:
            handle = (await asyncio.to_thread(self._scan)).get(task_id, handle)
        if handle.pid is None or not self._alive_or_child(handle):
            await self._release(task_id)
            return self._reap(task_id, handle)
        self._signal_group(handle.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._alive_or_child(handle):
            await asyncio.sleep(_STOP_POLL_S)
        if self._alive_or_child(handle):
            self._signal_group(handle.pid, signal.SIGKILL)
            deadline = time.monotonic() + _KILL_WAIT_S
            while self._alive_or_child(handle):
                if time.monotonic() > deadline:  # e.g. stuck in the kernel (D state): go on
                    log.warning("task %s: runner %d outlived SIGKILL", task_id, handle.pid)
                    break
                await asyncio.sleep(_STOP_POLL_S)
        # The job has its own session and may have started daemons: end them all.
        await self._release(task_id)
        return self._reap(task_id, handle)

    def _alive_or_child(self, handle: Handle) -> bool:
        child = self._children.get(handle.pid or -1)
        if child is not None:
            return child.poll() is None
        return self._alive(handle)

    def _reap(self, task_id: str, handle: Handle) -> int | None:
        child = self._children.pop(handle.pid or -1, None)
        recorded = self._exit_code(task_id)
        if child is not None and recorded is None:
            return child.poll()
        return recorded

    @staticmethod
    def _signal_group(pid: int, sig: int) -> None:
        """The wrapper's session (it and all it started); the wrapper alone when it leads no
        group (yet): a signal never silently reaches nobody."""
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        except PermissionError:
            pass

    async def remove(self, task_id: str, handle: Handle) -> None:
        await self.stop(task_id, handle, 0)
        if handle.pid is not None:  # a forked wrapper's record: not left for a scan to find
            with contextlib.suppress(OSError):
                (self._forked_dir / str(handle.pid)).unlink()
        await asyncio.to_thread(self.processes.release, task_id)
        self._released.discard(task_id)
        self._starts.pop(task_id, None)

    async def orphans(self, known: Iterable[str]) -> list[str]:
        known_ids = set(known)
        # On the event loop, not in a thread: ``known`` is current only until the next await,
        # and a submit meanwhile would fork a runner whose task it lacks (ended as an orphan)
        return [f"{t}:{h.pid}" for t, h in self._scan().items() if t not in known_ids]

    async def remove_orphan(self, name: str) -> None:
        task_id, _, pid = name.rpartition(":")
        log.info("killing orphan runner process group %s", pid)
        self._signal_group(int(pid), signal.SIGKILL)
        await asyncio.to_thread(self.processes.release, task_id)
