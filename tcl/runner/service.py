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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tcl import __version__
from tcl.atomic import write_atomic
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
from tcl.runner.codeinstall import CodeInstall
from tcl.runner.command import Where, job_command
from tcl.runner.errors import (
    CodeNotCached,
    Conflict,
    ExecutorError,
    IllegalTransition,
    InvalidSpec,
    SpecConflict,
    StorageError,
)
from tcl.runner.events import EventLog
from tcl.runner.executor import Executor
from tcl.runner.hangwatch import HangPolicy, HangWatch
from tcl.runner.masking import Masker
from tcl.runner.metricline import Phase
from tcl.runner.runnerconfig import RunnerConfig as RunnerConfig
from tcl.runner.states import StateMachine

if TYPE_CHECKING:
    from tcl.runner.treepatch import TreeSync

S = RunnerState
_PHASES = {S.RUNNING: Phase.JOB_STARTED}  # what a state change marks of the attempt's start
StateHook = Callable[[RunnerState, int | None], None]


class Runner(CodeInstall):
    def __init__(self, config: RunnerConfig, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        config.state_dir.mkdir(parents=True, exist_ok=True)
        self.log = EventLog(config.state_dir / "events", clock=clock, echo_fd=config.echo_events_fd)
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
        self._hangwatch: HangWatch | None = None
        self._hung_for: float | None = None  # the job was found hung after this many seconds
        self.cache = CodeCache(config.code_cache_dir) if config.code_cache_dir else None
        self.log.append_state(S.WAITING_SPEC)
        self.log.append_phase(Phase.RUNNER_READY)

    # -- state ---------------------------------------------------------------------------

    def add_state_hook(self, hook: StateHook) -> None:
        self._hooks.append(hook)

    def _on_state(self, state: RunnerState, exit_code: int | None) -> None:
        pid = self._job_pid if state is S.RUNNING else None
        hung = state is S.FAILED and self._hung_for is not None
        self.log.append_state(state, exit_code, pid, "hung" if hung else None)
        if state in _PHASES:
            self.log.append_phase(_PHASES[state])
        for hook in self._hooks:
            hook(state, exit_code)
        if state.is_final:
            self.log.finish()

    def health(self) -> HealthInfo:
        m = self.machine
        return HealthInfo(
            version=__version__, state=self.state, exit_code=m.exit_code, started=m.started
        )

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
            HangPolicy.of(spec.env)  # a bad TCL_HANG_* setting: 422 now, naming it
            resolve_placement(spec, os.environ)  # a scheduler env that makes no sense: 422 now
            self.machine.move(
                S.WAITING_CODE if spec.code else S.READY, expect=frozenset({S.WAITING_SPEC})
            )
            self.spec = spec
            return self.state

    async def start(self, spec: JobSpec) -> RunnerState:
        """``submit``, the code from the host's tree cache, ``run``: one request places a job
        whose tree the host has. A tree the cache lacks leaves the runner ``waiting_code``
        (upload it, then run), never an error; a repeat changes nothing."""
        state = self.submit(spec)
        if state is S.WAITING_CODE and spec.code is not None:
            with contextlib.suppress(CodeNotCached):
                state = await self.use_cached_code(spec.code.sha256)
        if state is S.READY:
            state = await asyncio.to_thread(self.run)
        return state

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
                    jobenv.write_ssh_snippet(self.config.ssh_env_file, spec, workdir, cmd.shell_env)
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
            policy = HangPolicy.of(spec.env)
            if policy is not None:
                self._hangwatch = HangWatch(self.log, policy, self._hung)
                self._hangwatch.start()
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

    def _hung(self, idle_s: float, limit_s: float, median_s: float) -> None:
        """The job stopped making progress (:mod:`tcl.runner.hangwatch`): its stacks, then
        its end (a failure: a retry policy places it again)."""
        with self._lock:
            executor = self.executor
            if executor is None or self.state is not S.RUNNING:
                return
            self._hung_for = idle_s
        self.say(
            f"no step for {idle_s:.0f} s (the limit: {limit_s:.0f} s, from a median step of "
            f"{median_s:.2f} s): the job looks hung; its stacks follow, then it is stopped"
        )
        executor.abort(self.config.stop_grace_s)

    def note_stop_signal(self) -> None:
        """A stop signal arrived (called at once, before :meth:`stop` runs on its thread)."""
        self._stop_signalled = True

    def _on_exit(self, exit_code: int, stopped: bool) -> None:
        if self._hangwatch is not None:
            self._hangwatch.close()
        if self._hung_for is not None:
            self.say(f"stopped as hung: no step for {self._hung_for:.0f} s")
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
        # The state as of the events read: never older than the last one, and never a final
        # state whose event is not among them or further on (a follower ends the attempt on it).
        (events, more), state, exit_code = self.machine.as_of(lambda: self.log.read(after, limit))
        return EventsPage(
            events=events,
            next=events[-1].seq if events else max(after, 0),
            state=state,
            exit_code=exit_code,
            more=more,
            signalled=self._stop_signalled,
        )

    def close(self) -> None:
        self.log.close()
