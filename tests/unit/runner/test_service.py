"""The Runner object directly (no HTTP): failure paths around starting the job."""

from __future__ import annotations

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
