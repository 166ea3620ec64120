"""Hang detection: a job that reported its steps and then stopped making progress.

A job reports a step with a metric line that has a ``step`` (``TCL_METRIC {"step": 120, ...}``:
``tcl.jobs`` prints one per logged step; a plain script prints one, or calls
``tcl.jobs.heartbeat(step)``). The runner reads them back from its own event log. Once it has
seen ``min_intervals`` intervals between increasing steps, no new step for longer than
``max(factor * the median interval, floor_s)`` is a hang: the runner says so on the job's log,
sends SIGABRT to the job's process group (Python dumps every thread's stack there:
``PYTHONFAULTHANDLER`` is set for the job), SIGKILL after a grace, and the job ends ``failed``
with its exit code (134), so a retry policy places it again (a ``tcl.jobs`` trainer resumes from
its latest checkpoint). A job that never reports a step is never judged; neither is a slow but
steady one (its median grows with it).

Settings, from the job's environment (``--env``): ``TCL_HANG=off`` turns it off;
``TCL_HANG_FACTOR`` (3), ``TCL_HANG_FLOOR_S`` (600). On every node of a multi-node job its own
runner watches it: one node stuck in a collective stalls the others, and each dumps its own.
"""

from __future__ import annotations

import json
import math
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tcl.runner.api import EventKind
from tcl.runner.errors import InvalidSpec
from tcl.runner.events import EventLog

OFF = "TCL_HANG"
FACTOR = "TCL_HANG_FACTOR"
FLOOR_S = "TCL_HANG_FLOOR_S"
POLL_S = 1.0
WINDOW = 50  # the intervals the median is taken over: the latest ones


@dataclass(frozen=True)
class HangPolicy:
    factor: float = 3.0
    floor_s: float = 600.0
    min_intervals: int = 2

    @classmethod
    def of(cls, env: Mapping[str, str]) -> HangPolicy | None:
        """The job's policy from its ``--env`` (None: off); a bad value names its variable."""
        if env.get(OFF, "").strip().lower() in ("0", "off", "false", "no"):
            return None
        return cls(factor=_positive(env, FACTOR, 3.0), floor_s=_positive(env, FLOOR_S, 600.0))


def _positive(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name)
    try:
        value = float(text) if text is not None else default
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise InvalidSpec("env", f"{name}={text!r}: a positive number")
    return value


class StepClock:
    """When the job's steps came; how long without one is a hang."""

    def __init__(self, policy: HangPolicy) -> None:
        self.policy = policy
        self._times: list[float] = []
        self._last: int | None = None

    def saw(self, step: int, at: float) -> None:
        if self._last is not None and step <= self._last:
            return  # a metric of a step already seen (eval, several kinds)
        self._last = step
        self._times = [*self._times[-WINDOW:], at]

    def median_s(self) -> float | None:
        gaps = [b - a for a, b in zip(self._times, self._times[1:], strict=False)]
        return statistics.median(gaps) if len(gaps) >= self.policy.min_intervals else None

    def limit_s(self) -> float | None:
        median = self.median_s()
        if median is None:
            return None
        return max(self.policy.factor * median, self.policy.floor_s)

    def idle_s(self, now: float) -> float | None:
        """How long since the last step, when that is past the limit (else None)."""
        limit = self.limit_s()
        if limit is None:
            return None
        idle = now - self._times[-1]
        return idle if idle > limit else None


class HangWatch:
    """Reads the job's step metrics from the event log as they come (timed by the events' own
    ``ts``: several read at once keep their spacing), and calls ``on_hang`` once (idle seconds,
    the limit, the median step) when the job stops making progress."""

    def __init__(
        self,
        log: EventLog,
        policy: HangPolicy,
        on_hang: Callable[[float, float, float], None],
        clock: Callable[[], float] = time.time,
        poll_s: float = POLL_S,
    ) -> None:
        self._log = log
        self.steps = StepClock(policy)
        self._on_hang = on_hang
        self._clock = clock
        self._poll_s = poll_s
        self._done = threading.Event()
        self._after = log.last_seq

    def start(self) -> None:
        threading.Thread(target=self._run, name="tcl-hangwatch", daemon=True).start()

    def close(self) -> None:
        self._done.set()

    def _run(self) -> None:
        while not self._done.wait(self._poll_s) and not self._log.finished:
            self._read()
            idle = self.steps.idle_s(self._clock())
            if idle is not None:
                limit, median = self.steps.limit_s() or 0.0, self.steps.median_s() or 0.0
                self._on_hang(idle, limit, median)
                return

    def _read(self) -> None:
        while True:
            events, more = self._log.read(self._after)
            for e in events:
                self._after = e.seq
                if e.kind is EventKind.METRIC and e.data:
                    step = _step(e.data)
                    if step is not None:  # when the runner read it: the line's own time
                        self.steps.saw(step, e.ts)
            if not more:
                return


def _step(data: str) -> int | None:
    try:
        step = json.loads(data).get("step")
    except (ValueError, AttributeError):
        return None
    return step if isinstance(step, int) and not isinstance(step, bool) else None
