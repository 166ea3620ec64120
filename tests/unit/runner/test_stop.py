"""Stopping costs no threads however often it is asked for, and time limits are enforced."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest

from tcl.runner.api import EventKind, JobSpec, LogStream, RunnerState
from tcl.runner.service import Runner, RunnerConfig

from .conftest import PY

S = RunnerState
IGNORES_SIGTERM = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    "print('ready', flush=True); time.sleep(600)"
)
# A shell ignores SIGTERM in its first instruction, milliseconds after its start, and its
# `sleep` inherits that: a Python job can still be starting when a short time limit's SIGTERM
# lands (under load it was, and died 143 instead of waiting for the SIGKILL).
SHELL_IGNORES_SIGTERM = ["sh", "-c", "trap '' TERM; echo ready; exec sleep 600"]


def wait_printed(runner: Runner, text: str) -> None:
    after = 0
    while True:
        events, _ = runner.log.read(after)
        if any(e.data == text for e in events):
            return
        after = events[-1].seq if events else after
        assert not runner.log.finished, "the job ended first"
        runner.log.wait_sync(after, 30)


def runner_log(runner: Runner) -> str:
    events, _ = runner.log.read(0)
    return "".join(e.data or "" for e in events if e.stream is LogStream.RUNNER)


def test_2000_stops_start_no_threads_and_the_earliest_kill_wins(tmp_path: Path) -> None:
    runner = Runner(RunnerConfig(tmp_path / "s"))
    try:
        runner.submit(JobSpec(run_id="r", argv=[PY, "-c", IGNORES_SIGTERM]))
        runner.run()
        wait_printed(runner, "ready\n")
        before = set(threading.enumerate())
        for _ in range(2000):
            assert runner.stop(3600) is S.RUNNING
        assert set(threading.enumerate()) - before == set()  # threads may end, none may start
        # A later stop with a shorter grace brings the SIGKILL forward: 0 s means now.
        runner.stop(0)
        assert runner.wait(30)
        assert (runner.state, runner.machine.exit_code) == (S.TERMINATED, 128 + signal.SIGKILL)
        assert "grace period over: SIGKILL" in runner_log(runner)
    finally:
        runner.stop(0)
        runner.wait(30)
        runner.close()


def test_max_duration_stops_the_job_with_the_configured_grace(tmp_path: Path) -> None:
    runner = Runner(RunnerConfig(tmp_path / "s", stop_grace_s=0.2))
    try:
        spec = JobSpec(run_id="r", argv=SHELL_IGNORES_SIGTERM, max_duration_s=1.0)
        runner.submit(spec)
        runner.run()
        assert runner.wait(30)
        assert (runner.state, runner.machine.exit_code) == (S.TERMINATED, 128 + signal.SIGKILL)
        log = runner_log(runner)
        assert "max_duration_s=1 reached" in log and "SIGKILL after 0.2 s" in log
    finally:
        runner.stop(0)
        runner.wait(30)
        runner.close()


def test_a_page_says_whether_a_signal_or_a_stop_request_ended_the_job(tmp_path: Path) -> None:
    """An evicted pod's runner gets SIGTERM; ``tcl stop`` asks over the API: a follower must
    tell the two apart (the first may be restarted by its scheduler, the second is the end)."""
    import asyncio
    import os

    from tcl.runner.signals import StopOnSignals

    async def end(runner: Runner, by_signal: bool) -> None:
        async with StopOnSignals(runner, 5):
            if by_signal:
                os.kill(os.getpid(), signal.SIGTERM)  # as the kubelet or scancel would
            else:
                runner.stop(5)
            await runner.finished()

    for by_signal in (False, True):
        runner = Runner(RunnerConfig(tmp_path / f"s{by_signal}", stop_grace_s=5))
        try:
            runner.submit(JobSpec(run_id="r", argv=["sleep", "600"]))
            runner.run()
            asyncio.run(end(runner, by_signal))
            page = asyncio.run(runner.events_page(0, 0, 100))
            assert (page.state, page.signalled) == (S.TERMINATED, by_signal)
        finally:
            runner.close()


def test_a_page_never_says_final_before_it_holds_the_final_state_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower that reads ``failed`` in a page ends the attempt with what the page holds: a
    page read between the state's move and its event (a hung job killed by its runner, CI15)
    said ``failed`` without the event saying ``hung``, and the attempt's cause was ``exit``."""
    import asyncio

    runner = Runner(RunnerConfig(tmp_path / "s", stop_grace_s=5))
    logged, release = threading.Event(), threading.Event()
    append_state = runner.log.append_state

    def slow_append_state(state: RunnerState, *args: object) -> int:
        if state.is_final:  # the move happened; its event is being written
            logged.set()
            release.wait(30)
        return append_state(state, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(runner.log, "append_state", slow_append_state)
    try:
        runner.submit(JobSpec(run_id="r", argv=[PY, "-c", "raise SystemExit(3)"]))
        runner.run()
        assert logged.wait(30)
        pages = []
        reader = threading.Thread(
            target=lambda: pages.append(asyncio.run(runner.events_page(0, 0, 100)))
        )
        reader.start()
        reader.join(0.5)  # a page read now: it must wait for the event or not say `failed`
        release.set()
        reader.join(30)
        (page,) = pages
        finals = [e.state for e in page.events if e.kind is EventKind.STATE and e.state]
        assert not page.state.is_final or page.state in finals, (page.state, finals)
    finally:
        release.set()
        runner.wait(30)
        runner.close()
