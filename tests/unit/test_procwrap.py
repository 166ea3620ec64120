"""The process executor's wrapper (``tcl/common/procwrap.py``), called in this process as the
shim's ``python -I -S procwrap.py`` calls it: it forks the runner's command, waits for it and
records how it ended in the exit file a restarted shim reads (``128 + N`` for a signal, 127
for a command that cannot start). Its stop-signal handling is put back after each test."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tcl.common import procwrap


@pytest.fixture(autouse=True)
def _handlers() -> Iterator[None]:
    """``main`` ignores SIGTERM/SIGINT/SIGHUP in the calling process (the wrapper outlives its
    runner's stop): this test process gets its own handlers back."""
    saved = {sig: signal.getsignal(sig) for sig in procwrap.STOP_SIGNALS}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def _recorded(exit_file: Path) -> int:
    assert not Path(f"{exit_file}.tmp").exists()  # written aside, then renamed
    assert exit_file.stat().st_mode & 0o777 == 0o600
    return int(exit_file.read_text())


def test_the_runner_s_exit_code_is_recorded(tmp_path: Path) -> None:
    exit_file = tmp_path / "exit"
    argv = ["--exit-file", str(exit_file), "--tcl-task", "t1", "--", "sh", "-c", "exit 3"]
    assert procwrap.main(argv) == 3
    assert _recorded(exit_file) == 3


def test_a_runner_killed_by_a_signal_is_recorded_as_128_plus_it(tmp_path: Path) -> None:
    exit_file = tmp_path / "exit"
    kill_self = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    assert procwrap.main(["--exit-file", str(exit_file), "--", *kill_self]) == 137
    assert _recorded(exit_file) == 128 + signal.SIGKILL


def test_a_command_that_cannot_start_is_127(tmp_path: Path) -> None:
    exit_file = tmp_path / "exit"
    missing = str(tmp_path / "no-such-runner")
    assert procwrap.main(["--exit-file", str(exit_file), "--", missing]) == 127
    assert _recorded(exit_file) == 127


def test_the_wrapper_ignores_a_stop_and_its_runner_gets_the_default(tmp_path: Path) -> None:
    """The runner starts with default stop signals (a SIGTERM ends it) while the wrapper, which
    must record that end, ignores them."""
    exit_file = tmp_path / "exit"
    term_self = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]
    assert procwrap.main(["--exit-file", str(exit_file), "--", *term_self]) == 128 + 15
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN


def test_without_an_exit_file_or_a_command_it_refuses(capfd: pytest.CaptureFixture[str]) -> None:
    assert procwrap.main(["--", "true"]) == 2
    assert procwrap.main(["--exit-file", "x", "true"]) == 2
    assert "usage: procwrap.py" in capfd.readouterr().err


def test_joining_a_cgroup_writes_the_pid_to_its_procs_file(tmp_path: Path) -> None:
    """What ``--cgroup`` does first (a plain directory stands in for the cgroup here)."""
    (tmp_path / "cgroup.procs").write_text("")
    procwrap.join_cgroup(str(tmp_path), os.getpid())
    assert (tmp_path / "cgroup.procs").read_text() == f"{os.getpid()}\n"
