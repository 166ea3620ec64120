"""A crowded store, as the dashboard's users had it: 2,000 runs (the newest pending, a few
running on GPU nodes and some failed among many succeeded), a 1,200-entry matrix whose entries
carry manifest fields (method, lang, run_kind, seed), and a run whose kept log mixes levels on
both streams. Rows are written in bulk (a second or so), runs' logs through :class:`LogCache`.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from tcl.control.logcache import LogCache
from tcl.control.runrequest import RunRequest
from tcl.control.states import AttemptCause, RunState
from tcl.control.store import RunRow, Store
from tcl.control.store.tables import AttemptRow
from tcl.control.sweep.model import EntryState
from tcl.control.sweep.tables import EntryRow, MatrixRow
from tcl.runner.api import Event, EventKind, LogStream, RunnerState

RUNS = 2000
PENDING = 18  # the newest: what the runs page used to lead with
RUNNING = 8
OOM = "RuntimeError: CUDA out of memory"
MATRIX = "big"
METHODS = ("fft", "conv", "attn")
LANGS = ("en", "de", "fr", "ja")
KINDS = ("train", "eval")
SEEDS = 50  # 3 x 4 x 2 x 50 = 1,200 entries
NAN = "ValueError: nan loss at step 120"
TWO_NODES = "crowd-0018"  # a running run on two GPU hosts


def crowd_id(i: int) -> str:
    return f"crowd-{i:04d}"


def crowd_state(i: int) -> RunState:
    """Run ``i`` (0 the newest): pending, then running, then mostly succeeded."""
    if i < PENDING:
        return RunState.PENDING
    if i < PENDING + RUNNING:
        return RunState.RUNNING
    if i % 64 == 7:
        return RunState.FAILED
    if i % 150 == 11:
        return RunState.TERMINATED
    return RunState.SUCCEEDED


# every state's count in the whole store: the crowd, conftest.seed()'s four runs, the log run
COUNTS = Counter(crowd_state(i).value for i in range(RUNS)) + Counter(
    {"succeeded": 2, "failed": 1, "running": 1, "pending": 1}
)


def _places(i: int) -> list[dict[str, object]]:
    if crowd_id(i) == TWO_NODES:
        return [
            {"host": "gpu-a", "task_id": "t-18a", "accelerators": [0, 1]},
            {"host": "gpu-b", "task_id": "t-18b", "accelerators": [2, 3]},
        ]
    return [{"host": f"gpu-{'abcd'[i % 4]}", "task_id": f"t-{i}", "accelerators": [i % 8]}]


def _message(state: RunState, i: int) -> tuple[str, int | None]:
    if state is RunState.FAILED:
        return f"exit code 3: {OOM} (step {i})", 3
    if state is RunState.SUCCEEDED:
        return "exit code 0", 0
    if state is RunState.TERMINATED:
        return "stopped by tcl stop", None
    return "", None


def _cause(state: RunState) -> str:
    if state is RunState.TERMINATED:
        return AttemptCause.STOPPED.value
    return AttemptCause.EXIT.value if state.is_final else ""


def seed_runs(store: Store, now: float) -> None:
    runs, attempts = [], []
    for i in range(RUNS):
        state = crowd_state(i)
        created = now - 60 * (i + 1)
        message, code = _message(state, i)
        placed = state is not RunState.PENDING
        nodes = _places(i)
        runs.append(
            RunRow(
                id=crowd_id(i),
                name=f"sweep-{i}",
                state=state.value,
                host=str(nodes[0]["host"]) if placed else None,
                backend="ssh" if placed else None,
                request={"argv": ["python", "train.py", str(i)], "chips": 1, "chip": "h100"},
                message=message,
                exit_code=code,
                created_at=created,
                updated_at=created + 30 + i % 600,  # a final run: 30 s to 10 min after start
            )
        )
        if placed:
            attempts.append(
                AttemptRow(
                    run_id=crowd_id(i),
                    attempt=0,
                    host=str(nodes[0]["host"]),
                    backend="ssh",
                    handle={"nodes": nodes},
                    state=state.value,
                    log_cursor=0,
                    created_at=created + 5,
                    cause=_cause(state),
                )
            )
    with store.session() as s:
        s.add_all(runs)
        s.flush()
        s.add_all(attempts)


def _entry_state(i: int) -> EntryState:
    if i % 37 == 5:
        return EntryState.FAILED
    if i >= 1100:
        return EntryState.QUEUED
    if i >= 1090:
        return EntryState.RUNNING
    return EntryState.DONE


def seed_matrix(store: Store, now: float) -> None:
    rows = []
    i = 0
    for method in METHODS:
        for lang in LANGS:
            for kind in KINDS:
                for seed in range(SEEDS):
                    state = _entry_state(i)
                    began = now - 3600 + i
                    started = None if state is EntryState.QUEUED else began
                    ended = began + 40 if state in (EntryState.DONE, EntryState.FAILED) else None
                    rows.append(
                        EntryRow(
                            matrix=MATRIX,
                            job_id=f"{method}-{lang}-{kind}-{seed}",
                            fields={"method": method, "lang": lang, "run_kind": kind, "seed": seed},
                            state=state.value,
                            priority=0,
                            not_before=0.0,
                            claims=0 if started is None else 1,
                            run_id=f"big-run-{i}",
                            last_error=f"Traceback\n{NAN}" if state is EntryState.FAILED else "",
                            created_at=now - 4000,
                            updated_at=now,
                            started_at=started,
                            ended_at=ended,
                        )
                    )
                    i += 1
    with store.session() as s:
        s.add(MatrixRow(name=MATRIX, spec={"argv": ["python", "sweep.py"]}, created_at=now - 4000))
        s.add_all(rows)


@dataclass(frozen=True)
class LogLine:
    stream: LogStream
    text: str
    level: str  # what the page should colour it as ("" plain)


LOG_RUN = "log-run"
LOG_LINES = [
    LogLine(LogStream.STDERR, "2025-11-28 10:00:00,001 tcl.jobs.launch devices: 1 cpu", ""),
    LogLine(LogStream.STDERR, "2025-11-28 10:00:01,123 tcl.jobs.trainer train step 5 loss 2.3", ""),
    LogLine(LogStream.STDOUT, "hello from stdout", ""),
    LogLine(LogStream.STDERR, "2025-11-28 10:00:01,200 INFO tcl.jobs.trainer eval done", "info"),
    LogLine(LogStream.STDERR, "WARNING:absl:no GPU found, falling back to CPU", "warning"),
    LogLine(LogStream.STDERR, "I1128 10:00:02.223456  140 xla.cc:99] XLA service started", "info"),
    LogLine(LogStream.STDERR, "W1128 10:00:02.323456  140 compiler.cc:12] slow compile", "warning"),
    LogLine(LogStream.STDERR, "E1128 10:00:03.000000  140 worker.cc:5] lost heartbeat", "error"),
    LogLine(LogStream.STDOUT, "2025-11-28 10:00:04,000 ERROR tcl.jobs checkpoint failed", "error"),
    LogLine(LogStream.STDERR, "DEBUG:jax._src.dispatch:tracing took 0.1 s", "debug"),
    LogLine(LogStream.STDERR, "/w/train.py:12: UserWarning: lr is large", "warning"),
    LogLine(LogStream.STDERR, "Traceback (most recent call last):", "error"),
    LogLine(LogStream.STDERR, '  File "/w/train.py", line 3, in <module>', "error"),
    LogLine(LogStream.STDERR, "    main()", "error"),
    LogLine(LogStream.STDERR, OOM, "error"),
    LogLine(LogStream.STDERR, "a plain line after the traceback", ""),
    LogLine(LogStream.STDERR, "CRITICAL:root:giving up", "error"),
]


def seed_log_run(store: Store) -> None:
    """A finished run whose kept log holds :data:`LOG_LINES`, in order, on their streams."""
    store.create_run(LOG_RUN, "levels", RunRequest(argv=["python", "train.py"]))
    store.set_placement(LOG_RUN, "here", "local", None)
    store.add_attempt(LOG_RUN, "here", "local")
    for st in (RunState.PROVISIONING, RunState.RUNNING):
        store.set_state(LOG_RUN, st)
    store.set_state(LOG_RUN, RunState.SUCCEEDED, exit_code=0, message="exit code 0")
    events = [
        Event(seq=n, ts=1000.0 + n, kind=EventKind.LOG, stream=line.stream, data=line.text + "\n")
        for n, line in enumerate(LOG_LINES, 1)
    ]
    end = len(LOG_LINES) + 1
    events.append(
        Event(seq=end, ts=2000.0, kind=EventKind.STATE, state=RunnerState.SUCCEEDED, exit_code=0)
    )
    LogCache(LOG_RUN).append(events)


def seed_crowd(store: Store) -> None:
    now = time.time()
    seed_runs(store, now)
    seed_matrix(store, now)
    seed_log_run(store)
