"""What a run's wall time went to: each attempt's time to its first step, and goodput.

An attempt's **time to first step** is cut at the moments it reached each phase of its start
(:class:`tcl.runner.metricline.Phase`, kept by :mod:`tcl.control.phasestore`), after it waited
to be placed: ``waited`` (from the run's submit, or the previous attempt's end, to its
placement), then one segment per phase reached, named after it (``runner_ready``: the runner's
start, ``env_ready``: the project's environment, ``compiled``: the first compile …). A phase an
attempt never marked (a plain script has no ``compiled``) is left out; its time goes to the next
one reached.

**Goodput** is the fraction of the run's wall time (its submit to its end, or to now) spent
stepping after each attempt's first step: the sum over attempts of (last step - first step),
over the wall time. Restarts, recompiles, queueing and the work lost since the last checkpoint
all lower it.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tcl.runner.metricline import Phase

if TYPE_CHECKING:
    from tcl.control.store import Attempt, Run

WAITED = "waited"  # the first segment: until the attempt was placed
#: the latest step a node reported: not a phase, kept beside them (the latest mark wins)
LAST_STEP = "last_step"
#: attempt -> phase (or LAST_STEP) -> when: the earliest of the attempt's nodes (the latest,
#: for LAST_STEP)
RunPhases = dict[int, dict[str, float]]


@dataclass(frozen=True)
class Segment:
    name: str  # WAITED, or the phase reached at its end
    seconds: float


@dataclass(frozen=True)
class StartTimes:
    """One attempt's start, cut into segments."""

    attempt: int
    segments: list[Segment]

    @property
    def to_first_step_s(self) -> float | None:
        """From its queueing to its first step (None: it reported no step)."""
        if not self.segments or self.segments[-1].name != Phase.FIRST_STEP.value:
            return None
        return sum(s.seconds for s in self.segments)

    def seconds(self, name: str) -> float | None:
        return next((s.seconds for s in self.segments if s.name == name), None)


def start_times(run: Run, attempts: Sequence[Attempt], phases: RunPhases) -> list[StartTimes]:
    """Each attempt's segments, oldest attempt first."""
    out: list[StartTimes] = []
    queued = run.created_at
    for att in attempts:
        marks = phases.get(att.attempt, {})
        segments = [Segment(WAITED, max(0.0, att.created_at - queued))]
        before = att.created_at
        for phase in Phase:
            at = marks.get(phase.value)
            if at is None:
                continue
            segments.append(Segment(phase.value, max(0.0, at - before)))
            before = max(before, at)
        out.append(StartTimes(att.attempt, segments))
        queued = att.ended_at if att.ended_at is not None else att.created_at
    return out


def goodput(
    run: Run, phases: RunPhases, now: float | None = None, ended_at: float | None = None
) -> float | None:
    """The fraction of the run's wall time spent stepping (None: no attempt reported two
    steps apart, or no time passed). ``ended_at``: the run's end (else now, or its last update
    once it is final)."""
    stepping = 0.0
    stepped = False
    for marks in phases.values():
        first, last = marks.get(Phase.FIRST_STEP.value), marks.get(LAST_STEP)
        if first is not None and last is not None and last > first:
            stepping += last - first
            stepped = True
    if not stepped:
        return None
    end = ended_at if ended_at is not None else None
    if end is None:
        end = run.updated_at if run.state.is_final else (now if now is not None else time.time())
    wall = end - run.created_at
    return min(1.0, stepping / wall) if wall > 0 else None
