"""The Runner object directly (no HTTP): failure paths around starting the job."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tcl.runner.api import JobSpec, LogStream, RunnerState
from tcl.runner.errors import StorageError
from tcl.runner.service import Runner, RunnerConfig


def test_unwritable_ssh_env_file_does_not_stop_the_job(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    runner = Runner(RunnerConfig(tmp_path / "s", ssh_env_file=tmp_path / "file" / "env.sh"))
    runner.submit(JobSpec(run_id="r", argv=["true"]))
    runner.run()
    assert runner.wait(30)
    events, _ = runner.log.read(0)
    assert runner.state is RunnerState.SUCCEEDED
    assert any(
        e.stream is LogStream.RUNNER and "ssh sessions will not" in (e.data or "") for e in events
    )


def test_unusable_working_dir_is_a_storage_error_and_nothing_runs(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    runner = Runner(RunnerConfig(tmp_path / "s"))
    runner.submit(JobSpec(run_id="r", argv=["true"], working_dir=str(tmp_path / "file" / "w")))
    with pytest.raises(StorageError):
        runner.run()
    assert runner.state is RunnerState.READY and runner.executor is None


def test_a_tcl_jobs_job_gets_an_argv_the_launcher_accepts(tmp_path: Path) -> None:
    from tcl.jobs.launch import parse  # the jobs library's own flag parser (imports JAX)
    from tcl.runner.api import JobRef
    from tcl.runner.jobenv import job_argv

    spec = JobSpec(
        run_id="run-7",
        name="tiny",
        project="p",
        job=JobRef(key="gpt/train", config_yaml="steps: 3\n", restore="step_2"),
        env={"TCL_OUT_DIR": "/mnt/runs/run-7"},
    )
    argv = job_argv(spec, tmp_path / "work", tmp_path / "job-config.yaml")
    assert argv[1:3] == ["-m", "tcl.jobs.launch"]
    opts = parse(argv[3:])
    assert (opts.key, opts.config_path, opts.out_dir) == (
        "gpt/train",
        tmp_path / "job-config.yaml",
        Path("/mnt/runs/run-7"),
    )
    assert (opts.run_id, opts.name, opts.project, opts.group, opts.restore) == (
        "run-7",
        "tiny",
        "p",
        "default",
        "step_2",
    )
    bare = job_argv(JobSpec(run_id="r", job=JobRef(key="k")), tmp_path / "w", tmp_path / "c.yaml")
    assert parse(bare[3:]).config_path is None and bare[5] == str(tmp_path / "w" / "out")


def _failed_to_start(runner: Runner) -> str:
    """Assert the run ended ``failed`` (127) without a job; return the runner's log lines."""
    assert runner.state is RunnerState.FAILED and runner.machine.exit_code == 127
    assert runner.wait(30)
    events, _ = runner.log.read(0)
    assert [e.state for e in events if e.state][-2:] == [RunnerState.RUNNING, RunnerState.FAILED]
    return "".join(e.data or "" for e in events if e.stream is LogStream.RUNNER)


@pytest.mark.parametrize("kind", ["directory", "not executable"])
def test_an_argv0_that_cannot_be_executed_fails_the_run(tmp_path: Path, kind: str) -> None:
    prog = tmp_path / "prog"
    if kind == "directory":
        prog.mkdir()
    else:
        prog.write_text("#!/bin/sh\n")
    runner = Runner(RunnerConfig(tmp_path / "s"))
    runner.submit(JobSpec(run_id="r", argv=[str(prog)]))
    assert runner.run() is RunnerState.FAILED
    assert f"cannot start {str(prog)!r}: Permission denied" in _failed_to_start(runner)


@pytest.mark.parametrize(
    "spec",
    [
        # Past the schema (model_construct skips validation): what Popen itself refuses.
        JobSpec.model_construct(run_id="r", argv=["ec\0ho"]),
        JobSpec.model_construct(run_id="r", argv=["true"], env={"A": "x\0"}),
        JobSpec.model_construct(run_id="r", argv=["true"], env={"A=B": "x"}),
    ],
)
def test_any_failure_to_start_fails_the_run_never_stays_running(
    tmp_path: Path, spec: JobSpec
) -> None:
    runner = Runner(RunnerConfig(tmp_path / "s"))
    runner.submit(spec)
    assert runner.run() is RunnerState.FAILED
    assert "cannot start" in _failed_to_start(runner)


def test_the_job_starts_in_its_cwd_below_the_working_dir(tmp_path: Path) -> None:
    runner = Runner(RunnerConfig(tmp_path / "s"))
    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "inner.py").write_text("import os; print(os.getcwd())\n")
    runner.submit(
        JobSpec(run_id="r", argv=[sys.executable, "inner.py"], working_dir=str(work), cwd="sub")
    )
    runner.run()
    assert runner.wait(30) and runner.state is RunnerState.SUCCEEDED
    events, _ = runner.log.read(0)
    assert [e.data for e in events if e.stream is LogStream.STDOUT] == [f"{work / 'sub'}\n"]
