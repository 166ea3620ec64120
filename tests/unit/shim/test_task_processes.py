"""Finding and ending every process of a task: by cgroup where the host allows, else by marker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tcl.shim.executors.cgroup import MARK_ENV, TaskProcesses, _cgroup2_mount, _own_cgroup
from tests.polling import wait_until

# A process that leaves its session and forks a daemon: what signalling a process group misses.
ESCAPE = (
    "import os, subprocess, sys, time\n"
    "d = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
    "print(d.pid, flush=True)\n"
    "time.sleep(600)\n"
)


def _spawn(env: dict[str, str], cgroup: Path | None) -> tuple[subprocess.Popen[str], int]:
    def join() -> None:
        if cgroup is not None:
            (cgroup / "cgroup.procs").write_text(str(os.getpid()))

    proc = subprocess.Popen(
        [sys.executable, "-c", ESCAPE],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=join,
    )
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def _dead(pid: int) -> bool:
    """Gone, or a zombie nobody reaped yet."""
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")
    except (ProcessLookupError, FileNotFoundError):
        return True


def _gone(pid: int) -> bool:
    return wait_until(lambda: _dead(pid), 30, f"process {pid} to end")


def test_markers_find_and_end_a_daemon_in_its_own_session() -> None:
    procs = TaskProcesses("inst1", cgroup_root=None)
    proc, daemon = _spawn({MARK_ENV: procs.mark("t1")}, None)
    other, other_daemon = _spawn({MARK_ENV: procs.mark("t2")}, None)
    try:
        assert {proc.pid, daemon} <= procs.pids("t1")
        assert procs.kill("t1") >= 2
        assert _gone(daemon) and proc.wait(10) == -9
        assert other.poll() is None and not _dead(other_daemon)  # another task's: spared
    finally:
        procs.kill("t2")
        other.wait(10)


def test_cgroups_end_everything_in_the_task_cgroup(tmp_path: Path) -> None:
    procs = TaskProcesses.discover(f"test{os.getpid()}")
    if not procs.uses_cgroups:
        pytest.skip("this host lets the tests create no cgroup v2")
    group = procs.prepare("t1")
    assert group is not None
    proc, daemon = _spawn({}, group)  # no marker: the cgroup alone finds them
    try:
        assert {proc.pid, daemon} <= procs.pids("t1")
        procs.release("t1")
        assert _gone(daemon) and proc.wait(10) == -9
        assert procs.cgroup_root is not None
        assert not group.exists() and not procs.cgroup_root.exists()  # nothing left behind
    finally:
        procs.release("t1")


def test_the_kill_spares_what_it_is_told_to() -> None:
    procs = TaskProcesses("inst2", cgroup_root=None)
    proc, daemon = _spawn({MARK_ENV: procs.mark("t")}, None)
    try:
        procs.kill("t", spare={proc.pid})
        assert _gone(daemon) and proc.poll() is None
    finally:
        procs.kill("t")
        proc.wait(10)


def test_the_cgroup2_mount_and_own_cgroup_are_parsed() -> None:
    info = (
        "31 1 0:27 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
    )
    assert _cgroup2_mount(info) == Path("/sys/fs/cgroup/unified")
    assert _cgroup2_mount("31 1 0:27 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n") is None
    assert _own_cgroup("1:cpu:/\n0::/system.slice/tcl-shim.service\n") == (
        "/system.slice/tcl-shim.service"
    )
