"""tests.cpuprofile: what a process is and which test it belongs to, from what the sampler reads
of it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests import cpuprofile


def test_kinds_of_process() -> None:
    venv = "/r/.venv/bin"
    cases = {
        (f"{venv}/python", "-u", "-c", "import sys;exec(eval(sys.stdin.readline()))"): (
            "pytest-xdist worker"
        ),
        (f"{venv}/python", f"{venv}/tcl", "submit", "-d"): "tcl submit",
        (f"{venv}/python", "-m", "tcl.control.daemon", "--idle-exit-s", "20"): (
            "tcl serve (daemon)"
        ),
        (f"{venv}/python", f"{venv}/tcl-runner", "forkserver", "--tcl-instance", "x"): (
            "tcl-runner fork server and its runners"
        ),
        (f"{venv}/python", f"{venv}/tcl-runner", "batch", "--spec", "s"): "tcl-runner",
        (f"{venv}/python", "-m", "tcl.jobs.launch", "gpt/train"): "tcl.jobs job",
        (f"{venv}/python", "-m", "tcl.shim.main", "--uds", "s"): "tcl-shim",
        ("/usr/sbin/slurmd", "-N", "node1"): "slurmd",
        (f"{venv}/python", "-m", "bench.gpucheck.mfu"): "python -m bench.gpucheck.mfu",
        ("python3", "-I", "-c", "print(1)"): "python -c",
        ("python3", "/x/job.py", "e001"): "python job.py",
    }
    assert {argv: cpuprofile.kind(list(argv)) for argv in cases} == cases


def test_a_process_is_named_for_the_test_whose_home_it_has(tmp_path: os.PathLike[str]) -> None:
    home = "/tmp/pytest-of-root/pytest-181/popen-gw2/test_a_preempted_node_stops_bo0/home"
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        env={"HOME": home, "PATH": os.environ["PATH"]},
    )
    try:
        deadline = time.monotonic() + 10
        while cpuprofile._test_of(child.pid, []) == "" and time.monotonic() < deadline:
            time.sleep(0.01)  # its environ is readable once it exec'd
        assert cpuprofile._test_of(child.pid, []) == "test_a_preempted_node_stops_bo"
    finally:
        child.kill()
        child.wait()
    argv = ["tcl-shim", "--state-dir", "/tmp/pytest-of-root/pytest-9/jfs0/shim-a/state"]
    assert cpuprofile._test_of(-1, argv) == "jfs"  # no such process: its command line
