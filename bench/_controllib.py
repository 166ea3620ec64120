"""Shared set-up for the control benchmarks (not a benchmark itself).

A key-only sshd on 127.0.0.1:2222 (scripts/testbed/ssh-up.sh with no netns hosts), a shim
installed there by `tcl host setup` (docker executor, fake h100:8), and a private HOME/state
dir and config, so nothing of the user's is touched.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TCL = str(Path(sys.executable).parent / "tcl")
VENV = str(Path(sys.executable).parent.parent)
SSH_BASE = "/tmp/tcl-bench-control"


def path_with_this_python() -> str:
    """PATH with this venv's bin first: a local job's `python` is then the interpreter the
    baseline runs (sys.executable), however the bench was started (outside `uv run`, PATH's
    python may be another one, e.g. a pyenv shim: +0.08 s of CPU and wall per start)."""
    return os.pathsep.join((str(Path(sys.executable).parent), os.environ.get("PATH", "")))


from tcl.control.daemon.client import stop_daemon  # noqa: E402 (after the path is set)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def runner_image() -> str:
    from bench._shimlib import runner_image as build

    return build()


class Bed:
    def __init__(self, root: Path, image: str, executor: str = "docker") -> None:
        self.root = root
        self.home = root / "home"
        self.home.mkdir()
        # What a submit ships: a small git repo of its own. The bed's root holds the state dir,
        # the logs and the host's shim dir, which grow with every submit (shipped from there,
        # each submit sent more than the one before: 0.6 s grew to 5 s in 7 submits).
        self.work = root / "work"
        self.work.mkdir()
        subprocess.run(["git", "init", "-q", str(self.work)], check=True)
        (self.work / "train.py").write_text("print('first-line', flush=True)\n")
        self.ssh = Path(SSH_BASE) / "ssh"
        self.shim_dir = root / "shim"
        self.image = image
        self.executor = executor
        self.config = root / "config.yaml"
        self.config.write_text(
            "hosts:\n"
            f"  box: {{type: ssh, ssh: 127.0.0.1, port: 2222, user: root,"
            f" identity_file: {self.ssh}/id_ed25519, known_hosts: {self.ssh}/known_hosts,"
            f" ssh_config_file: {self.ssh}/ssh_config, shim_venv: {VENV},"
            f" shim_port: {free_port()}, shim_dir: {self.shim_dir}, executor: {executor},"
            f' fake_accelerators: "h100:8"' + (f', image: "{image}"' if image else "") + "}\n"
        )

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "HOME": str(self.home),
            "TCL_STATE_DIR": str(self.home / "state"),
            "TCL_CONFIG": str(self.config),
            "NO_COLOR": "1",
        }

    def tcl(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [TCL, *args],
            env=self.env(),
            cwd=cwd or self.work,
            capture_output=True,
            text=True,
            check=True,
        )

    def ssh_argv(self) -> list[str]:
        return ["ssh", "-F", str(self.ssh / "ssh_config"), "-p", "2222", "127.0.0.1"]

    def cleanup_runs(self) -> None:
        if self.executor != "docker":
            return  # the shim's process executor: stopping the shim ends its tasks
        import docker

        res = subprocess.run(
            [TCL, "ps", "-a", "--json"],
            env=self.env(),
            cwd=self.root,
            capture_output=True,
            text=True,
            check=False,
        )
        if res.returncode != 0:
            print(f"cleanup: tcl ps failed: {res.stderr.strip()}", file=sys.stderr)
            return
        runs = json.loads(res.stdout)
        ids = tuple(r["run_id"] for r in runs)
        client = docker.from_env()
        for c in client.containers.list(all=True, filters={"label": "tcl.shim.task-id"}):
            if ids and c.labels.get("tcl.shim.task-id", "").startswith(ids):
                with suppress(docker.errors.APIError):  # the shim may be removing it already
                    c.remove(force=True)


@contextmanager
def ssh_box() -> Iterator[Path]:
    """The key-only sshd on 127.0.0.1:2222 (scripts/testbed/ssh-up.sh, no netns hosts), brought
    up fresh and taken down after; yields its dir (keys, ``ssh_config``, ``known_hosts``)."""
    env = {**os.environ, "BASE": SSH_BASE, "N": "0"}
    down = ["bash", str(REPO / "scripts/testbed/ssh-down.sh")]
    subprocess.run(down, env=env, check=False, capture_output=True)
    up = ["bash", str(REPO / "scripts/testbed/ssh-up.sh")]
    subprocess.run(up, env=env, check=True, capture_output=True)
    try:
        yield Path(SSH_BASE) / "ssh"
    finally:
        subprocess.run(down, env=env, check=False, capture_output=True)


@contextmanager
def testbed(executor: str = "docker") -> Iterator[Bed]:
    """The sshd host ``box`` with a shim; jobs in the runner image (``docker``) or as processes
    of the host (``process``: tcl's venv, shared with this checkout)."""
    with ssh_box():
        root = Path(tempfile.mkdtemp(prefix="tcl-bench-control."))
        bed = Bed(root, runner_image() if executor == "docker" else "", executor)
        try:
            bed.tcl("host", "setup", "box")
            yield bed
        finally:
            try:
                bed.cleanup_runs()
            finally:
                stop_daemon(bed.home / "state" / "serve")
                pid = bed.shim_dir / "shim.pid"
                if pid.exists():
                    with suppress(ProcessLookupError):
                        os.kill(int(pid.read_text()), 15)
                shutil.rmtree(root, ignore_errors=True)


def time_to_line(argv: list[str], env: dict[str, str], cwd: Path, want: str) -> float:
    """Seconds from start until a stdout line equal to ``want`` is printed."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    assert proc.stdout is not None
    elapsed = float("nan")
    for line in proc.stdout:
        if line.strip() == want:
            elapsed = time.perf_counter() - t0
            break
    proc.stdout.close()
    proc.wait(120)
    return elapsed


def interleaved_first_lines(
    tcl_argv: list[str], base_argv: list[str], env: dict[str, str], cwd: Path, reps: int, warm: int
) -> tuple[list[float], list[float]]:
    """``tcl_argv`` and ``base_argv`` to their "first-line", in turns (after ``warm`` uncounted
    rounds: connections, caches): the seconds of each, tcl's and the baseline's."""
    for _ in range(warm):
        time_to_line(tcl_argv, env, cwd, "first-line")
        time_to_line(base_argv, env, cwd, "first-line")
    tcl_s, base_s = [], []
    for _ in range(reps):
        tcl_s.append(time_to_line(tcl_argv, env, cwd, "first-line"))
        base_s.append(time_to_line(base_argv, env, cwd, "first-line"))
    return tcl_s, base_s


def print_ratio(base_what: str, tcl_s: list[float], base_s: list[float], target: float) -> None:
    t, b = statistics.median(tcl_s), statistics.median(base_s)
    print(f"tcl submit -> first line: median {t:.3f} s  {[round(x, 3) for x in tcl_s]}")
    print(f"{base_what} -> first line: median {b:.3f} s  {[round(x, 3) for x in base_s]}")
    print(f"ratio tcl/baseline: {t / b:.2f} (target <= {target:g})")
