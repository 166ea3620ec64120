"""Runs the job: its own process group, output pumped into the event log, stop and time limit.

Threads, not the event loop, move the bytes: one pump reads both pipes in the order the job
wrote them, decodes UTF-8, masks secrets and appends events (stdout's metric lines as metric
events: :mod:`.pump`, :mod:`.output`), so a busy job never stalls the HTTP server. A waiter
thread reaps the process, waits until the pump has drained both pipes and only then reports
the exit, so the last log events always
come before the terminal state. One watchdog thread keeps the two deadlines (the kill after a
stop's grace, the spec's time limit): stops, however many, only move a deadline, so they cost
no thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from tcl.runner.api import LogStream
from tcl.runner.errors import ExecutorError
from tcl.runner.events import EventLog
from tcl.runner.limits import DEFAULT_GRACE_S
from tcl.runner.masking import Masker
from tcl.runner.pump import PIPE_BYTES, OutputPump

# After the main process exits: how long its leftovers may keep the pipes open.
DRAIN_S = 1.0

ExitCallback = Callable[[int, bool], None]  # (exit_code, stopped)


def exit_code_of(returncode: int) -> int:
    """Shell convention: killed by signal N -> 128 + N."""
    return returncode if returncode >= 0 else 128 - returncode


class Executor:
    """One job process (group). ``start`` once; ``stop`` any number of times."""

    def __init__(
        self,
        log: EventLog,
        argv: Sequence[str],
        cwd: Path,
        env: Mapping[str, str],
        secrets: Sequence[str],
        on_exit: ExitCallback,
        max_duration_s: float | None = None,
        limit_grace_s: float = DEFAULT_GRACE_S,
        *,
        end_orphans: bool = False,
    ) -> None:
        self._end_orphans = end_orphans
        self._log = log
        self._argv = list(argv)
        self._cwd = cwd
        self._env = dict(env)
        self._secrets = list(secrets)
        self._on_exit = on_exit
        self._max_duration_s = max_duration_s
        self._limit_grace_s = limit_grace_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._deadlines = threading.Condition(self._lock)  # the watchdog sleeps on this
        self._stopping = False
        self._sent: set[signal.Signals] = set()
        # time.monotonic() deadlines kept by the watchdog; None: not set (or already acted on).
        self._kill_at: float | None = None
        self._limit_at: float | None = None
        self._reaped = False
        self._done = threading.Event()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def say(self, message: str) -> None:
        """A runner line in the job's log (masked like the job's own output)."""
        masker = Masker(self._secrets)
        with contextlib.suppress(RuntimeError):  # the log already finished
            self._log.append_log(LogStream.RUNNER, masker.feed(message + "\n") + masker.flush())

    def start(self) -> None:
        """Start the job and watch it: :meth:`spawn`, then :meth:`watch`."""
        self.spawn()
        self.watch()

    def spawn(self) -> None:
        """Start the job's process (its output waits in the pipes until :meth:`watch`); any
        failure to do so is an ``ExecutorError`` and leaves no process."""
        try:
            self._proc = subprocess.Popen(
                self._argv,
                cwd=self._cwd,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,  # own process group: stop() signals all of it
                bufsize=0,
            )
        except OSError as e:
            raise ExecutorError(f"cannot start {self._argv[0]!r}: {e.strerror or e}") from e
        except Exception as e:  # ValueError (a NUL), TypeError, ...: still the job's failure
            raise ExecutorError(f"cannot start {self._argv[0]!r}: {type(e).__name__}: {e}") from e
        assert self._proc.stdout is not None and self._proc.stderr is not None
        for pipe in (self._proc.stdout, self._proc.stderr):
            with contextlib.suppress(OSError, AttributeError):  # Linux only; a hint
                fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)

    def watch(self) -> None:
        """Pump the spawned job's output, reap it, keep its deadlines; a failure to do so ends
        the job and is an ``ExecutorError``."""
        assert self._proc is not None
        if self._max_duration_s is not None:
            self._limit_at = time.monotonic() + self._max_duration_s
        try:
            self._start_threads()
        except Exception as e:  # no thread to read or reap it: the process must not stay
            self._signal(signal.SIGKILL)
            self._proc.wait()
            with self._lock:
                self._reaped = True
                self._deadlines.notify_all()
            self._close_pipes()
            self._done.set()
            raise ExecutorError(f"cannot watch the job: {type(e).__name__}: {e}") from e

    def _start_threads(self) -> None:
        assert self._proc is not None
        assert self._proc.stdout is not None and self._proc.stderr is not None
        pump = OutputPump(
            self._log,
            self._secrets,
            [
                (self._proc.stdout.fileno(), LogStream.STDOUT),
                (self._proc.stderr.fileno(), LogStream.STDERR),
            ],
        )
        pumps = [threading.Thread(target=pump.run, name="tcl-pump", daemon=True)]
        for t in pumps:
            t.start()
        threading.Thread(target=self._watch, name="tcl-watchdog", daemon=True).start()
        threading.Thread(target=self._reap, args=(pumps,), name="tcl-reaper", daemon=True).start()

    def stop(self, grace_s: float, sig: signal.Signals = signal.SIGTERM) -> None:
        """``sig`` to the whole group, SIGKILL after ``grace_s``; repeatable.

        A repeated stop sends its signal only if that signal was not sent yet (a second
        ``/api/stop`` must not re-run the job's SIGTERM handler), and moves the kill earlier
        if its grace ends sooner, never later."""
        with self._lock:
            if self._reaped or self._proc is None:
                return
            first = not self._stopping
            self._stopping = True
            send = sig not in self._sent
            self._sent.add(sig)
            kill_at = time.monotonic() + grace_s
            if self._kill_at is None or kill_at < self._kill_at:
                self._kill_at = kill_at
                self._deadlines.notify_all()
        if first:
            self.say(f"stopping: {sig.name} to the process group, SIGKILL after {grace_s:g} s")
        elif send:
            self.say(f"{sig.name} to the process group")
        if send:
            self._signal(sig)

    def abort(self, grace_s: float) -> None:
        """SIGABRT to the whole group (Python dumps its threads' stacks: PYTHONFAULTHANDLER),
        SIGKILL after ``grace_s``; its exit is the job's failure, not a stop (a hung job)."""
        with self._lock:
            if self._reaped or self._proc is None or signal.SIGABRT in self._sent:
                return
            self._sent.add(signal.SIGABRT)
            kill_at = time.monotonic() + grace_s
            if self._kill_at is None or kill_at < self._kill_at:
                self._kill_at = kill_at
                self._deadlines.notify_all()
        self.say(f"SIGABRT to the process group, SIGKILL after {grace_s:g} s")
        self._signal(signal.SIGABRT)

    def wait(self, timeout_s: float | None = None) -> bool:
        return self._done.wait(timeout_s)

    # -- internals -----------------------------------------------------------------------

    def _watch(self) -> None:
        """The watchdog: sleeps until the earliest deadline, acts on it, until the reap."""
        while True:
            with self._deadlines:
                action = self._next_due()
                while action is None:
                    if self._reaped:
                        return
                    pending = [d for d in (self._kill_at, self._limit_at) if d is not None]
                    self._deadlines.wait(min(pending) - time.monotonic() if pending else None)
                    action = self._next_due()
            action()

    def _next_due(self) -> Callable[[], None] | None:
        """The action whose deadline has passed (cleared so it runs once); lock held."""
        if self._reaped:
            return None
        now = time.monotonic()
        if self._kill_at is not None and now >= self._kill_at:
            self._kill_at = None
            return self._kill
        if self._limit_at is not None and now >= self._limit_at:
            self._limit_at = None
            return self._time_limit
        return None

    def _time_limit(self) -> None:
        self.say(f"max_duration_s={self._max_duration_s:g} reached")
        self.stop(self._limit_grace_s)

    def _kill(self) -> None:
        self.say("grace period over: SIGKILL to the process group")
        self._signal(signal.SIGKILL)

    def _signal(self, sig: signal.Signals) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    def _close_pipes(self) -> None:
        assert self._proc is not None
        for pipe in (self._proc.stdout, self._proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()

    def _reap(self, pumps: list[threading.Thread]) -> None:
        assert self._proc is not None
        returncode = self._proc.wait()
        for t in pumps:
            t.join(DRAIN_S)
        if any(t.is_alive() for t in pumps):
            # Leftover children still hold the pipes: the job is over, end them too.
            self._signal(signal.SIGKILL)
            for t in pumps:
                t.join(DRAIN_S)
        with self._lock:
            stopped = self._stopping
            self._reaped = True  # stop() is a no-op from here on; the watchdog ends
            self._deadlines.notify_all()
        # Leftovers of a finished job (daemons it started) do not outlive it.
        self._signal(signal.SIGKILL)
        if self._end_orphans:
            from tcl.runner.reaper import end_orphans

            if ended := end_orphans():
                self.say(f"ended {ended} process(es) the job left running")
        self._close_pipes()
        try:
            self._on_exit(exit_code_of(returncode), stopped)
        finally:
            self._done.set()
