"""The one-line metric format any job may print on stdout, and its parsing.

A line ``TCL_METRIC {"step": 120, "kind": "train", "loss": 2.31, "lr": 3e-4}`` (the prefix,
one space, a JSON object) is a metric, not a log line: the runner keeps it as an event of kind
``metric`` in the run's event log (so it resumes, survives the host and needs no second
channel), its ``data`` the object re-written canonically. ``step`` (an integer) and ``kind``
(a short name for a series group: ``train``, ``val``) are optional; every other key with a
finite number is a value; other keys are dropped. A record needs a value or a step (a step
alone is a heartbeat: ``tcl.jobs.heartbeat``, read by hang detection, not a metric point). A
line that starts with the prefix but is not such an object stays a log line.

A line ``TCL_METRIC {"phase": "compiled"}`` (that key alone, one of :class:`Phase`) marks a
phase of the attempt's start (time-to-first-step): it becomes a ``phase`` event. ``tcl.jobs``
prints the phases only it can see (JAX ready, first compile done); the runner records the rest
itself (:meth:`tcl.runner.events.EventLog.append_phase`), each once per attempt.
"""

from __future__ import annotations

import enum
import json
import math
from dataclasses import dataclass
from typing import Any

PREFIX = "TCL_METRIC "
MAX_LINE_BYTES = 16 * 1024  # a metric line longer than this is an ordinary log line
MAX_VALUES = 64
MAX_KIND_CHARS = 64
_RESERVED = ("step", "kind", "ts")


@dataclass(frozen=True)
class MetricRecord:
    step: int | None
    kind: str
    values: dict[str, float]

    def to_json(self) -> str:
        body: dict[str, Any] = {}
        if self.step is not None:
            body["step"] = self.step
        if self.kind:
            body["kind"] = self.kind
        body.update(self.values)
        return json.dumps(body, separators=(",", ":"), sort_keys=True)


class Phase(enum.StrEnum):
    """The phases of an attempt's start, in order: each is the moment it was reached."""

    RUNNER_READY = "runner_ready"  # the runner is up, waiting for its job
    ENV_READY = "env_ready"  # the project's environment is built or found (a uv project)
    JOB_STARTED = "job_started"  # the job's process started
    JAX_READY = "jax_ready"  # JAX is initialised, distributed too (tcl.jobs)
    STATE_READY = "state_ready"  # the model's state is initialised or restored (tcl.jobs)
    TRACED = "traced"  # the first step's program is traced and lowered (tcl.jobs)
    COMPILED = "compiled"  # ... and compiled, or found in JAX's cache (tcl.jobs)
    FIRST_STEP = "first_step"  # the first step was reported (a metric line with a step)


def phase_line(phase: Phase) -> str:
    """The line a job prints when it reaches ``phase``."""
    return format_line({"phase": phase.value})


def parse_phase(obj: object) -> Phase | None:
    if not isinstance(obj, dict) or len(obj) != 1 or not isinstance(obj.get("phase"), str):
        return None
    try:
        return Phase(obj["phase"])
    except ValueError:
        return None


def format_line(record: dict[str, Any]) -> str:
    """The line a job prints for ``record`` (what :func:`parse_line` reads back)."""
    return PREFIX + json.dumps(record, separators=(",", ":"), allow_nan=False, default=str)


def parse_record(obj: object) -> MetricRecord | None:
    """A metric from a decoded JSON object, or None when it is not one."""
    if not isinstance(obj, dict):
        return None
    step = obj.get("step")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        return None
    kind = obj.get("kind", "")
    if not isinstance(kind, str) or len(kind) > MAX_KIND_CHARS:
        return None
    values: dict[str, float] = {}
    for key, value in obj.items():
        if key in _RESERVED or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value) and len(key) <= 128:
            values[str(key)] = float(value)
    if (not values and step is None) or len(values) > MAX_VALUES:
        return None  # a step alone is a heartbeat (tcl.jobs.heartbeat): kept, for hang detection
    return MetricRecord(step, kind, values)


def parse_json(data: str) -> MetricRecord | None:
    try:
        return parse_record(json.loads(data))
    except ValueError:
        return None


def parse_line(line: str) -> MetricRecord | Phase | None:
    """The metric or phase a printed line holds (trailing newline allowed), or None."""
    if not line.startswith(PREFIX) or len(line) > MAX_LINE_BYTES:
        return None
    try:
        obj = json.loads(line[len(PREFIX) :].strip())
    except ValueError:
        return None
    return parse_phase(obj) or parse_record(obj)
