"""What the runner does when it is asked to stop by a signal; ``serve`` and ``batch`` share it.

A container stop (``docker stop``, a Kubernetes eviction), SLURM's ``scancel`` or preemption,
a shim's terminate: each sends the runner a signal and, some time later, SIGKILL. The job is
what must get that time, so the runner forwards the signal it got to the job's process group
(SIGUSR1 stays SIGUSR1: SLURM's ``--signal`` warnings mean something to the job), keeps
pumping the job's output into the event log, SIGKILLs the group after the grace period, writes
the final state, and only then exits, with ``EXIT_TERMINATED``. A job not started yet is
terminated at once.

The handlers are the event loop's (``loop.add_signal_handler``): a signal delivered to any of
the runner's threads wakes the loop through its self-pipe, and the work happens outside signal
context, in one thread that takes the signals in the order they came.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import signal
import threading
from collections.abc import Callable
from types import TracebackType

from tcl.runner.api import RunnerState
from tcl.runner.errors import RunnerError
from tcl.runner.service import Runner

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)
# The runner's exit status when a signal ended its job (or its wait for one), whichever signal
# it was: the status of a process ended by SIGTERM, which is what the sender asked for.
EXIT_TERMINATED = 128 + signal.SIGTERM


class StopOnSignals:
    """``async with StopOnSignals(runner, grace_s, on_final):`` while inside, each signal of
    ``STOP_SIGNALS`` becomes ``runner.stop(grace_s, sig)``; once the state is final after the
    first one, ``on_final`` runs (the server shuts down). ``received`` is the first signal."""

    def __init__(
        self, runner: Runner, grace_s: float, on_final: Callable[[], None] | None = None
    ) -> None:
        self.runner = runner
        self.grace_s = grace_s
        self.on_final = on_final
        self.received: signal.Signals | None = None
        self._signals: queue.SimpleQueue[signal.Signals | None] = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._forward, name="tcl-signals", daemon=True)
        self._final: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def __aenter__(self) -> StopOnSignals:
        self._loop = asyncio.get_running_loop()
        self._worker.start()
        for sig in STOP_SIGNALS:
            self._loop.add_signal_handler(sig, self._on_signal, sig)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._loop is not None
        for sig in STOP_SIGNALS:
            self._loop.remove_signal_handler(sig)
        self._signals.put(None)
        if self._final is not None:
            self._final.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._final

    def exit_status(self, default: int) -> int:
        """The runner's exit status: ``EXIT_TERMINATED`` when a signal ended the run, else the
        job's exit code once it ended, else ``default``."""
        state, code = self.runner.state, self.runner.machine.exit_code
        if self.received is not None and state is RunnerState.TERMINATED:
            return EXIT_TERMINATED
        return code if state.is_final and code is not None else default

    def _on_signal(self, sig: signal.Signals) -> None:
        # On the loop, not in signal context; Runner.stop may wait for the runner's lock (a code
        # extraction), so it runs on the worker thread, never here.
        self.runner.note_stop_signal()
        self._signals.put(sig)
        if self.received is None:
            self.received = sig
            assert self._loop is not None
            self._final = self._loop.create_task(self._when_final())

    def _forward(self) -> None:
        while (sig := self._signals.get()) is not None:
            self.runner.say(f"the runner got {sig.name}")
            try:
                self.runner.stop(self.grace_s, sig)
            except RunnerError as e:  # e.g. the state moved on meanwhile; the log says why
                self.runner.say(f"{sig.name}: cannot stop: {e.detail}")

    async def _when_final(self) -> None:
        await self.runner.finished()
        if self.on_final is not None:
            self.on_final()
