"""The dashboard's wire schema (pydantic): what ``tcl ui``'s endpoints answer. The UI owns it;
the page (``static/app.js``) reads exactly these fields."""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, Field


class Info(BaseModel):
    version: str
    allow_actions: bool


class NodeItem(BaseModel):
    """Where one node of an attempt ran, from its handle (no host asked)."""

    host: str
    task: str  # what the host calls it
    accelerators: list[int]  # the host's indices it holds (GPUs, TPU chips); empty: not known


class RunItem(BaseModel):
    run_id: str
    name: str
    state: str
    host: str | None
    backend: str | None
    chips: int
    chip: str | None
    created_at: float  # epoch seconds
    age_s: float
    command: str
    message: str
    exit_code: int | None
    session: str | None
    live: bool  # not final: it can be stopped
    # from its first attempt's start to its end (now, while live); None: never placed
    duration_s: float | None = None
    nodes: list[NodeItem] = Field(default_factory=list)  # its latest attempt's
    cause: str = ""  # why it ended, short ("exit 3", "stopped", "node lost"); "" when it did not
    error: str = ""  # the last line of its error (a failed job's last stderr line), or ""


class RunOrder(enum.StrEnum):
    RECENT = "recent"  # newest first
    ATTENTION = "attention"  # running, then failed, then the rest newest first (the page's)


class RunList(BaseModel):
    runs: list[RunItem]
    total: int  # runs matching the filter (the page holds at most ``limit`` of them)
    counts: dict[str, int]  # runs per state in the whole store, every state (zeros included)


class StartSegment(BaseModel):
    """A part of an attempt's time to first step (``tcl.control.goodput``)."""

    phase: str  # ``waited`` (until placed), or the phase reached at its end
    seconds: float


class AttemptItem(BaseModel):
    attempt: int
    host: str
    backend: str
    state: str
    cause: str | None  # why it ended (tcl.control.states.AttemptCause), None while it runs
    created_at: float | None
    nodes: list[NodeItem] = Field(default_factory=list)
    started_at: float | None = None  # its job started running (None: not yet, or not kept)
    ended_at: float | None = None
    duration_s: float | None = None  # how long its job ran (so far, while it runs)
    pid: int | None = None  # its job's, on its first node, as its runner reported it
    start: list[StartSegment] = Field(default_factory=list)  # its time to first step, in parts
    to_first_step_s: float | None = None  # None: it reported no step


class RunDetail(BaseModel):
    run: RunItem
    request: dict[str, Any]  # what was submitted (secrets by name only)
    attempts: list[AttemptItem]
    nodes: int  # of its latest attempt
    goodput: float | None = None  # the share of its wall time spent stepping (None: no steps)


class MetricPointItem(BaseModel):
    seq: int
    step: int | None
    kind: str
    node: int
    ts: float
    values: dict[str, float]


class MetricPage(BaseModel):
    points: list[MetricPointItem]
    next: int  # the ``after`` of the next poll
    more: bool  # the page was full: ask again at once


class StopResult(BaseModel):
    run: RunItem


class MatrixItem(BaseModel):
    id: str
    name: str
    counts: dict[str, int]  # every entry state, zeros included
    total: int
    created_at: float


class EntryItem(BaseModel):
    index: int  # its position in the matrix (the order entries were added)
    job_id: str
    state: str
    run_id: str | None
    params: dict[str, Any]
    error: str  # the last line of its last error ("" when none)
    started_at: float | None
    ended_at: float | None


class FailureItem(BaseModel):
    job_id: str
    run_id: str | None
    ended_at: float | None
    error: str


class MatrixDetail(BaseModel):
    id: str
    name: str
    created_at: float
    counts: dict[str, int]
    total: int
    entries: list[EntryItem]
    runs_per_hour: float
    eta_s: float | None  # None: nothing to estimate from yet
    failures: list[FailureItem]  # newest first
    fields: list[str]  # the entries' manifest field names (their params), first seen first


class RequeueResult(BaseModel):
    requeued: int
    scheduler: str  # what places them (a `tcl serve` started or found), or why nothing does


class AcceleratorItem(BaseModel):
    index: int
    chip: str
    free: bool
    task_id: str | None = None


class HostItem(BaseModel):
    name: str
    type: str
    address: str
    reachable: bool | None
    detail: str  # what it offers, or why it cannot be reached
    free: int
    busy: int
    accelerators: list[AcceleratorItem] = Field(default_factory=list)


class HostList(BaseModel):
    hosts: list[HostItem]


class ErrorBody(BaseModel):
    error: str
    detail: str
