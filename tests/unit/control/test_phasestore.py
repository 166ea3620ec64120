"""Each attempt's phases and last step in the state store, and what they say: its time to
first step, segment by segment, and the run's goodput. On SQLite here; the same checks run on
PostgreSQL in tests/integration/control/test_store_postgres.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tcl.control.goodput import LAST_STEP, WAITED, goodput, start_times
from tcl.control.logcache import KeptEvent
from tcl.control.phasestore import PhaseStore
from tcl.control.runrequest import RunRequest
from tcl.control.states import RunState
from tcl.control.store import Attempt, Run, Store
from tcl.runner.api import EventKind, LogStream


def phase(ts: float, name: str, attempt: int = 0, node: int = 0) -> KeptEvent:
    return KeptEvent(seq=1, ts=ts, kind=EventKind.PHASE, data=name, attempt=attempt, node=node)


def step(ts: float, n: int, attempt: int = 0, node: int = 0, extra: str = "") -> KeptEvent:
    return KeptEvent(
        seq=1,
        ts=ts,
        kind=EventKind.METRIC,
        stream=LogStream.STDOUT,
        data=f'{{"step":{n}{extra}}}',
        attempt=attempt,
        node=node,
    )


def exercise_phasestore(store: Store) -> None:
    """Shared by the SQLite and the PostgreSQL test."""
    store.create_run("p-1", "p", RunRequest(argv=["x"]))
    ps = PhaseStore(store)
    ps.add(
        "p-1",
        [
            phase(10.0, "runner_ready"),
            phase(11.0, "runner_ready", node=1),  # the attempt's: its first node's
            phase(12.0, "job_started"),
            phase(13.0, "bogus"),  # not a phase: skipped
            step(20.0, 1),
            step(21.0, 2, extra=',"loss":1.5'),
            step(22.5, 3, node=1),
            KeptEvent(seq=1, ts=30.0, kind=EventKind.LOG, data="hi\n"),
        ],
    )
    # kept again (a second pull, another workstation): nothing changes; a later step moves on
    ps.add("p-1", [phase(5.0, "runner_ready"), step(21.0, 2), step(25.0, 4, attempt=1)])
    ps.add("p-1", [step(23.0, 5)])
    got = ps.of_runs(["p-1", "nothing"])
    assert got == {
        "p-1": {
            0: {"runner_ready": 10.0, "job_started": 12.0, LAST_STEP: 23.0},
            1: {LAST_STEP: 25.0},
        }
    }
    assert ps.of_runs([]) == {}


def test_phase_store_on_sqlite(tmp_path: Path) -> None:
    store = Store(f"sqlite:///{tmp_path / 'tcl.db'}")
    try:
        exercise_phasestore(store)
    finally:
        store.close()


def _run(created: float, state: RunState = RunState.RUNNING, updated: float = 0.0) -> Run:
    return Run(
        id="r",
        name="r",
        state=state,
        host="h",
        backend="ssh",
        request=RunRequest(argv=["x"]),
        code_sha256=None,
        exit_code=None,
        message="",
        created_at=created,
        updated_at=updated or created,
    )


def _attempt(n: int, placed: float, ended: float | None = None) -> Attempt:
    return Attempt(
        run_id="r",
        attempt=n,
        host="h",
        backend="ssh",
        handle={},
        state=RunState.RUNNING,
        log_cursor=0,
        created_at=placed,
        ended_at=ended,
    )


def test_an_attempt_s_start_is_cut_at_the_phases_it_reached() -> None:
    run = _run(100.0)
    attempts = [_attempt(0, 101.0, ended=150.0), _attempt(1, 152.0)]
    phases = {
        0: {
            "runner_ready": 101.5,
            "job_started": 102.0,
            "jax_ready": 104.0,
            "state_ready": 105.0,
            "compiled": 115.0,
            "first_step": 115.5,
            LAST_STEP: 149.0,
        },
        # a plain script's: no compile it could mark; time goes to the next phase reached
        1: {"runner_ready": 152.25, "job_started": 152.5, "first_step": 154.0},
    }
    first, second = start_times(run, attempts, phases)
    assert [(s.name, s.seconds) for s in first.segments] == [
        (WAITED, 1.0),
        ("runner_ready", 0.5),
        ("job_started", 0.5),
        ("jax_ready", 2.0),
        ("state_ready", 1.0),
        ("compiled", 10.0),
        ("first_step", 0.5),
    ]
    assert first.to_first_step_s == 15.5 and first.seconds("compiled") == 10.0
    # the second waited from the first's end
    assert [(s.name, s.seconds) for s in second.segments] == [
        (WAITED, 2.0),
        ("runner_ready", 0.25),
        ("job_started", 0.25),
        ("first_step", 1.5),
    ]
    assert second.seconds("compiled") is None
    # still starting: no first step yet
    (starting,) = start_times(run, [_attempt(0, 101.0)], {0: {"runner_ready": 102.0}})
    assert starting.to_first_step_s is None


def test_goodput_is_the_time_spent_stepping_after_each_first_step() -> None:
    phases = {
        0: {"first_step": 110.0, LAST_STEP: 150.0},  # 40 s of steps
        1: {"first_step": 160.0, LAST_STEP: 200.0},  # 40 s more
        2: {"runner_ready": 201.0},  # started, no step yet
    }
    assert goodput(_run(100.0), phases, now=200.0) == pytest.approx(0.8)
    # a run that ended: its end, not now
    done = _run(100.0, RunState.SUCCEEDED, updated=300.0)
    assert goodput(done, phases, now=10_000.0) == pytest.approx(0.4)
    # no attempt stepped twice: nothing to say
    assert goodput(_run(100.0), {0: {"first_step": 110.0, LAST_STEP: 110.0}}) is None
    assert goodput(_run(100.0), {}) is None
