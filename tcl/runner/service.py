"""The runner's core: spec, code, state machine, executor and event log behind one object.

The HTTP app (``app.py``) and batch mode (``batch.py``) both drive a ``Runner``; neither holds
state of its own. Calls are safe from any thread and from the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tcl import __version__
from tcl.atomic import write_atomic
from tcl.runner import code as codemod
from tcl.runner import jobenv
from tcl.runner import session as sessionmod
from tcl.runner.api import (
    EventsPage,
    HealthInfo,
    JobSpec,
    LogStream,
    RunnerState,
    SessionInfo,
    SyncAck,
    SyncPatch,
)
from tcl.runner.cluster import resolve_placement
from tcl.runner.codecache import CodeCache
from tcl.runner.command import Where, job_command
from tcl.runner.errors import (
    CodeHashMismatch,
    CodeNotCached,
    Conflict,
    ExecutorError,
    IllegalTransition,
    InvalidRequest,
    InvalidSpec,
    PayloadTooLarge,
    SpecConflict,
    StorageError,
)
from tcl.runner.events import EventLog
from tcl.runner.executor import Executor
from tcl.runner.limits import DEFAULT_GRACE_S
from tcl.runner.masking import Masker
from tcl.runner.states import StateMachine

if TYPE_CHECKING:
    from tcl.runner.treepatch import TreeSync

S = RunnerState
StateHook = Callable[[RunnerState, int | None], None]


@dataclass(frozen=True)
class RunnerConfig:
    state_dir: Path
    max_code_bytes: int = codemod.DEFAULT_MAX_CODE_BYTES
    max_unpacked_bytes: int = codemod.DEFAULT_MAX_UNPACKED_BYTES
    max_members: int = codemod.DEFAULT_MAX_MEMBERS  # in the code tarball
    # Where ssh sessions find the job's working dir and env (None: not written).
    ssh_env_file: Path | None = None
    # A content-addressed cache of extracted trees shared by the host's runners (None: none).
    code_cache_dir: Path | None = None
    # JAX's persistent compilation cache of the host's jobs (None: JAX's default, none): a
    # later attempt of a run (a retry, a requeue after preemption) skips its recompiles.
    compile_cache_dir: Path | None = None
    # Where the host keeps the jobs' project environments (``tcl.runner.projectenv``; None:
    # each job's runner builds its own, under its state dir).
    project_env_dir: Path | None = None
    # The sha256 of the tree the executor already mounted (an overlay) as the default working
    # dir: installing that code is then a no-op.
    premounted_code: str | None = None
    # End every descendant the job leaves behind (tcl.runner.reaper). Only for a runner that is
    # a process of its own (serve, batch), never one embedded in another program.
    end_orphans: bool = False
    # How long a job may take to exit after the runner forwards it a stop signal, and after
    # its max_duration_s, before SIGKILL (``--stop-grace-s``).
    stop_grace_s: float = DEFAULT_GRACE_S


class Runner:
    def __init__(self, config: RunnerConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        config.state_dir.mkdir(parents=True, exist_ok=True)
        self.log = EventLog(config.state_dir / "events", clock=clock)
        self._hooks: list[StateHook] = []
        self.machine = StateMachine(on_change=self._on_state)
        self.spec: JobSpec | None = None
        self.executor: Executor | None = None
        self._job_pid: int | None = None  # the running state's event carries it
        self._lock = threading.RLock()
        self._uploading = False
        self._code_sha256: str | None = None
        self.session: sessionmod.Session | None = None
        self._tree: TreeSync | None = None  # live code sync's view of the working dir
        # A stop signal reached the runner (scancel, preemption). SLURM signals every process
        # of the step, so the job may exit of it before the runner's own stop reaches the
        # executor: its exit is still the stop's outcome, not a failure.
        self._stop_signalled = False
        self.cache = CodeCache(config.code_cache_dir) if config.code_cache_dir else None
        self.log.append_state(S.WAITING_SPEC)

    # -- state ---------------------------------------------------------------------------

    @property
    def state(self) -> RunnerState:
        return self.machine.state

    def add_state_hook(self, hook: StateHook) -> None:
        self._hooks.append(hook)

    def _on_state(self, state: RunnerState, exit_code: int | None) -> None:
        pid = self._job_pid if state is S.RUNNING else None
        self.log.append_state(state, exit_code, pid)
        for hook in self._hooks:
            hook(state, exit_code)
        if state.is_final:
            self.log.finish()

    def health(self) -> HealthInfo:
        m = self.machine
        return HealthInfo(
            version=__version__, state=self.state, exit_code=m.exit_code, started=m.started
        )

    @property
    def workdir(self) -> Path:
        if self.spec is not None and self.spec.working_dir:
            return Path(self.spec.working_dir)
        return self.config.state_dir / "work"

    # -- steps ---------------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> RunnerState:
        """Accept the spec; the same spec again is a no-op, a different one a conflict."""
        with self._lock:
            if self.spec is not None:
                if spec == self.spec:
                    return self.state
                raise SpecConflict(f"a different spec (run_id {self.spec.run_id}) was submitted")
            if spec.working_dir is not None and not Path(spec.working_dir).is_absolute():
                raise InvalidSpec("working_dir", "working_dir must be an absolute path")
            if spec.argv is None and spec.job is None and spec.session is None:
                raise InvalidSpec("argv", "neither argv, job nor session is given: nothing to run")
            resolve_placement(spec, os.environ)  # a scheduler env that makes no sense: 422 now
            self.machine.move(
                S.WAITING_CODE if spec.code else S.READY, expect=frozenset({S.WAITING_SPEC})
            )
            self.spec = spec
            return self.state

    def _begin_code(self, sha256: str | None, content_length: int | None) -> str | None:
        """Check that code with this hash is expected now and mark an install in progress.

        Returns the normalised hash, or None when that code is already installed (a retry)."""
        sha256 = (sha256 or "").strip().lower()
        if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
            raise InvalidRequest("header X-Code-Sha256 must be the body's sha256 (64 hex digits)")
        with self._lock:
            spec = self.spec
            if (
                spec is not None
                and self.state is not S.WAITING_CODE
                and sha256 == self._code_sha256
            ):
                return None  # the same code again (a retry after a lost answer)
            if spec is None or self.state is not S.WAITING_CODE or self._uploading:
                busy = " (an upload is in progress)" if self._uploading else ""
                raise IllegalTransition(f"code is not expected in state {self.state}{busy}")
            if spec.code is not None and spec.code.sha256 != sha256:
                raise CodeHashMismatch(
                    f"X-Code-Sha256 {sha256} is not the spec's code.sha256 {spec.code.sha256}"
                )
            limit = self.config.max_code_bytes
            if content_length is not None and content_length > limit:
                raise PayloadTooLarge(
                    f"code upload of {content_length} bytes is over the limit of {limit} bytes"
                )
            self._uploading = True
            return sha256

    def _end_code(self) -> None:
        with self._lock:
            self._uploading = False

    async def use_cached_code(self, sha256: str) -> RunnerState:
        """Install code from the host's tree cache without an upload; CodeNotCached if absent."""
        checked = self._begin_code(sha256, None)
        if checked is None:
            return self.state
        try:
            if self.cache is None or self.cache.tree(checked) is None:
                where = "in this host's code cache" if self.cache else "here (no code cache)"
                raise CodeNotCached(f"code {checked} is not {where}; upload it (PUT /api/code)")
            await asyncio.to_thread(self._install_cached, checked)
        finally:
            self._end_code()
        return self.state

    def _install_cached(self, sha256: str) -> None:
        assert self.cache is not None
        premounted = self.config.premounted_code == sha256 and (
            self.spec is None or self.spec.working_dir is None
        )
        if not premounted:
            self.cache.materialise(sha256, self.workdir)
        self._code_ready(sha256)

    async def upload_code(
        self, chunks: AsyncIterator[bytes], sha256: str | None, content_length: int | None
    ) -> RunnerState:
        """Receive, verify and extract the tarball; state goes to ready."""
        checked = self._begin_code(sha256, content_length)
        if checked is None:
            return self.state
        sha256, limit = checked, self.config.max_code_bytes
        archive = self.config.state_dir / "code.tar.gz"
        try:
            await codemod.receive(chunks, archive, sha256, limit)
            await asyncio.to_thread(self._extract, archive, sha256)
        finally:
            archive.unlink(missing_ok=True)
            self._end_code()
        return self.state

    def use_code_file(self, archive: Path) -> None:
        """Batch mode: the tarball is already on disk (checked against the spec's hash)."""
        with self._lock:
            spec = self.spec
            if spec is None or self.state is not S.WAITING_CODE:
                raise IllegalTransition(f"code is not expected in state {self.state}")
            actual = codemod.sha256_file(archive)
            if spec.code is not None and actual != spec.code.sha256:
                raise CodeHashMismatch(
                    f"sha256 of {archive} is {actual}, the spec says {spec.code.sha256}"
                )
            self._extract(archive, actual)

    def _extract(self, archive: Path, sha256: str) -> None:
        if self.cache is not None:
            self.cache.add(sha256, archive, self.config.max_unpacked_bytes, self.config.max_members)
            self.cache.materialise(sha256, self.workdir)
        else:
            codemod.extract(
                archive, self.workdir, self.config.max_unpacked_bytes, self.config.max_members
            )
        self._code_ready(sha256)

    def _code_ready(self, sha256: str) -> None:
        with self._lock:
            self._code_sha256 = sha256
            self.machine.move(S.READY, expect=frozenset({S.WAITING_CODE}))

    def run(self) -> RunnerState:
        """Start the job in its own process group."""
        with self._lock:
            spec = self.spec
            if spec is None or self.state is not S.READY:
                if self.executor is not None:
                    return self.state  # run is idempotent once started (a retried request)
                raise IllegalTransition(
                    f"cannot run in state {self.state}: the job needs a spec and its code"
                )
            workdir = self.workdir
            job_dir = workdir / spec.cwd if spec.cwd else workdir
            config_file = self.config.state_dir / "job-config.yaml"
            try:
                # the submit's directory may hold nothing shipped (all ignored): start there anyway
                job_dir.mkdir(parents=True, exist_ok=True)
                if spec.job is not None and spec.job.config_yaml:
                    write_atomic(config_file, spec.job.config_yaml.encode())
            except (OSError, ValueError) as e:  # ValueError: a path the OS cannot take
                raise StorageError(f"cannot prepare the working dir {workdir}: {e}") from e
            where = Where(
                workdir,
                job_dir,
                config_file,
                self.config.state_dir,
                self.config.compile_cache_dir,
                self.config.project_env_dir,
            )
            cmd = job_command(spec, where)
            self.session = cmd.session
            argv, env, secret_values = cmd.argv, cmd.env, cmd.secret_values
            executor = Executor(
                self.log,
                argv,
                job_dir,
                env,
                secret_values,
                self._on_exit,
                spec.max_duration_s,
                end_orphans=self.config.end_orphans,
                limit_grace_s=self.config.stop_grace_s,
            )
            unwritable = ""
            if self.config.ssh_env_file is not None:
                try:
                    jobenv.write_ssh_snippet(self.config.ssh_env_file, spec, workdir)
                except OSError as e:  # ssh sessions are a convenience: the job runs anyway
                    unwritable = f"ssh sessions will not get the job's env: {e}"
            self.executor = executor
            try:
                executor.spawn()  # its output waits in the pipes: it comes after `running`
            except ExecutorError as e:  # every failure to start: never running without a job
                self.machine.move(S.RUNNING)
                executor.say(e.detail)
                self.machine.move(S.FAILED, exit_code=127)
                return self.state
            self._job_pid = executor.pid
            self.machine.move(S.RUNNING)
            placement = resolve_placement(spec, os.environ)
            if placement.cluster.nodes > 1 or placement.attempt != spec.attempt:
                self.say(placement.describe())
            if unwritable:
                self.say(unwritable)
            try:
                executor.watch()
            except ExecutorError as e:
                executor.say(e.detail)
                self.machine.move(S.FAILED, exit_code=127)
            return self.state

    def session_info(self) -> SessionInfo:
        """The job's interactive session (409 when the job is not one, or has not started)."""
        with self._lock:
            session = self.session
            state = self.state
        if session is None:
            kind = self.spec.session if self.spec is not None else None
            why = "has not started" if kind is not None else "is not an interactive session"
            raise Conflict(f"the job {why}")
        running = state is S.RUNNING
        return session.info(running, "" if running else f"the job is {state.value}")

    def sync(self, patch: SyncPatch) -> SyncAck:
        """Apply a live code change to the working dir (``tcl sync``): all files or none."""
        from tcl.runner.treepatch import TreeSync

        with self._lock:
            if self.state not in (S.READY, S.RUNNING):
                raise Conflict(f"cannot sync code in state {self.state.value}")
            if self._tree is None:
                self._tree = TreeSync(self.workdir, self._code_sha256 or "")
            tree = self._tree
        return tree.apply(patch)

    def fail_to_start(self, detail: str) -> RunnerState:
        """The job cannot start (its node lacks what it needs): ``detail`` on the runner's log,
        then failed with 127, as for a program that is missing; nothing runs."""
        with self._lock:
            if self.state is not S.READY:
                raise IllegalTransition(f"cannot fail a job to start in state {self.state}")
            self.say(detail)
            self.machine.move(S.FAILED, exit_code=127)
            return self.state

    def note_stop_signal(self) -> None:
        """A stop signal arrived (called at once, before :meth:`stop` runs on its thread)."""
        self._stop_signalled = True

    def _on_exit(self, exit_code: int, stopped: bool) -> None:
        with self._lock:
            stopped = stopped or self._stop_signalled
            final = S.TERMINATED if stopped else S.SUCCEEDED if exit_code == 0 else S.FAILED
            self.machine.move(final, exit_code=exit_code)

    def stop(self, grace_s: float, sig: signal.Signals = signal.SIGTERM) -> RunnerState:
        """Send ``sig`` to the job's group, SIGKILL after ``grace_s`` (or abandon a job not
        started yet: terminated at once); repeatable."""
        with self._lock:
            if self.state.is_final:
                return self.state
            if self.state is S.RUNNING:
                assert self.executor is not None
                executor = self.executor
            else:
                self.machine.move(S.TERMINATED)
                return self.state
        executor.stop(grace_s, sig)
        return self.state

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until the state is final and recorded (events, status hooks)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.log.finished:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            self.log.wait_sync(self.log.last_seq, remaining)
        return True

    async def finished(self) -> None:
        """Return once the state is final and recorded (``wait`` for the event loop)."""
        while not self.log.finished:
            await self.log.wait(self.log.last_seq, None)

    def say(self, message: str) -> None:
        """A line on the ``runner`` stream of the job's log, secrets masked."""
        masker = Masker(self.spec.secrets.values() if self.spec else ())
        with contextlib.suppress(RuntimeError):  # the log finished meanwhile: nobody reads on
            self.log.append_log(LogStream.RUNNER, masker.feed(message + "\n") + masker.flush())

    # -- reading -------------------------------------------------------------------------

    async def events_page(self, after: int, wait_s: float, limit: int) -> EventsPage:
        if wait_s > 0:
            await self.log.wait(after, wait_s)
        events, more = self.log.read(after, limit)
        # Read the state after the events, so ``state`` is never older than the last event.
        return EventsPage(
            events=events,
            next=events[-1].seq if events else max(after, 0),
            state=self.state,
            exit_code=self.machine.exit_code,
            more=more,
            signalled=self._stop_signalled,
        )

    def close(self) -> None:
        self.log.close()
