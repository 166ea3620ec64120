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
