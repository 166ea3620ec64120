"""A job's output into events: stdout's whole TCL_METRIC lines become metric events, in order;
everything else (stderr always, a malformed or a split line) stays log text, masked as ever."""

from __future__ import annotations

import sys
from pathlib import Path

from tcl.runner.api import Event, EventKind, JobSpec, LogStream, RunnerState
from tcl.runner.events import EventLog
from tcl.runner.metricline import PREFIX, Phase, format_line, phase_line
from tcl.runner.output import StreamOutput
from tcl.runner.service import Runner, RunnerConfig

M1 = format_line({"kind": "train", "step": 1, "loss": 2.5})
M2 = format_line({"kind": "val", "step": 1, "val_loss": 3.0})


def kinds(events: list[Event]) -> list[tuple[str, str | None]]:
    return [(e.kind.value, e.data) for e in events]


def test_metric_lines_split_out_of_stdout_text_in_order(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    out = StreamOutput(log, LogStream.STDOUT)
    out.write(f"a\nb\n{M1}\n{M2}\nc\n")
    out.write("no metric here\n")
    events, _ = log.read(0)
    assert kinds(events) == [
        ("log", "a\nb\n"),
        ("phase", "first_step"),  # the first metric with a step: the attempt's first step
        ("metric", '{"kind":"train","loss":2.5,"step":1}'),
        ("metric", '{"kind":"val","step":1,"val_loss":3.0}'),
        ("log", "c\n"),
        ("log", "no metric here\n"),
    ]
    assert all(e.stream is LogStream.STDOUT for e in events if e.kind is not EventKind.PHASE)


def test_stderr_and_malformed_lines_stay_log_text(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    StreamOutput(log, LogStream.STDERR).write(f"{M1}\n")
    out = StreamOutput(log, LogStream.STDOUT)
    out.write("TCL_METRIC nope\nTCL_METRIC {}\n")
    events, _ = log.read(0)
    assert kinds(events) == [("log", f"{M1}\n"), ("log", "TCL_METRIC nope\nTCL_METRIC {}\n")]


def test_only_a_whole_line_is_a_metric(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    out = StreamOutput(log, LogStream.STDOUT)
    out.write("progress 10%")  # went out early, after a pause
    out.write(f"{M1}\n")  # the rest of that line: text
    out.write(f"{M1}")  # a last line without its newline (the job's end)
    events, _ = log.read(0)
    assert kinds(events) == [
        ("log", "progress 10%"),
        ("log", f"{M1}\n"),
        ("phase", "first_step"),
        ("metric", '{"kind":"train","loss":2.5,"step":1}'),
    ]


def test_an_unfinished_line_waits_only_when_it_may_become_a_metric(tmp_path: Path) -> None:
    out = StreamOutput(EventLog(tmp_path), LogStream.STDOUT)
    assert out.waits("TCL_") and out.waits(PREFIX + '{"lo') and out.waits("T")
    assert not out.waits("Password: ") and not out.waits("TCL_METRICS")
    assert not StreamOutput(EventLog(tmp_path / "e"), LogStream.STDERR).waits("TCL_")
    out.write("half a line")
    assert not out.waits("TCL_")  # not at a line's start: can never be a metric


def test_a_jobs_metric_lines_become_events_and_secrets_stay_masked(tmp_path: Path) -> None:
    """Through the real executor: a process, its pipes, the pump (batch mode runs the same)."""
    script = (
        "import sys, time\n"
        "print('hello', flush=True)\n"
        f"print({M1!r}, flush=True)\n"
        "sys.stdout.write('TCL_MET'); sys.stdout.flush(); time.sleep(0.3)\n"  # a pause mid-line
        'sys.stdout.write(\'RIC {"step": 2, "loss": 2.0}\\n\'); sys.stdout.flush()\n'
        "print('TCL_METRIC nope', flush=True)\n"
        "print('tok hunter2', flush=True)\n"
        f"print({M2!r}, file=sys.stderr, flush=True)\n"
    )
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "job.py").write_text(script)
    runner = Runner(RunnerConfig(tmp_path / "s"))
    spec = JobSpec(
        run_id="m",
        argv=[sys.executable, "job.py"],
        working_dir=str(tmp_path / "w"),
        secrets={"TOK": "hunter2"},
    )
    runner.submit(spec)
    runner.run()
    assert runner.wait(30) and runner.state is RunnerState.SUCCEEDED
    events, _ = runner.log.read(0)
    metrics = [e for e in events if e.kind is EventKind.METRIC]
    assert [(e.stream, e.data) for e in metrics] == [
        (LogStream.STDOUT, '{"kind":"train","loss":2.5,"step":1}'),
        (LogStream.STDOUT, '{"loss":2.0,"step":2}'),
    ]
    text = {
        s: "".join(e.data or "" for e in events if e.kind is EventKind.LOG and e.stream is s)
        for s in LogStream
    }
    assert text[LogStream.STDOUT] == "hello\nTCL_METRIC nope\ntok ***\n"
    assert text[LogStream.STDERR] == f"{M2}\n"
    runner.close()


def test_phase_lines_are_phase_events_kept_once_and_a_job_s_first_step_wins(
    tmp_path: Path,
) -> None:
    log = EventLog(tmp_path)
    out = StreamOutput(log, LogStream.STDOUT)
    out.write(f"{phase_line(Phase.JAX_READY)}\nstarting\n{phase_line(Phase.JAX_READY)}\n")
    out.write(f"{phase_line(Phase.FIRST_STEP)}\n{M1}\n")  # the job marked it: the metric doesn't
    events, _ = log.read(0)
    assert kinds(events) == [
        ("phase", "jax_ready"),
        ("log", "starting\n"),
        ("phase", "first_step"),
        ("metric", '{"kind":"train","loss":2.5,"step":1}'),
    ]
