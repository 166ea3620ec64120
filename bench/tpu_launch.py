"""Launch on an existing 3-worker TPU pod (shims up): `tcl submit` → the first line from every
worker, against SSH-ing the same command to the 3 workers in parallel, same run.

The pod is the Cloud TPU API emulator (tests/tpuemu) with the sshd testbed's netns hosts as
its workers (scripts/testbed/ssh-up.sh); the node is created and every shim installed by a
first, untimed submit, and `tcl serve` is warm. tcl: `tcl submit --chip tpu-v5p -n 12 -- python
hi.py`, timed until the 3rd worker's line is printed (code snapshot, solve, 3 tasks, code to 3
workers, 3 runners, job start, log follow). Baseline: 3 parallel `ssh WORKER python hi.py`
(new connections, as a user's loop would). Target: ratio <= 1.5 (medians). Needs root; uses the
testbed's fixed netns names, so do not run it beside the tpu tests.

    uv run python -m bench.tpu_launch [--reps 5]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.tpuemu import TpuEmulator
from tests.tpuemu.workers import hosts_of_testbed

ROOT = Path(__file__).resolve().parent.parent
TCL = str(Path(sys.executable).parent / "tcl")
VENV = str(Path(sys.executable).parent.parent)
BASE = "/tmp/tcl-bench-tpu"
HI = "import os; print('hi', os.environ.get('TCL_NODE_RANK', '-'), flush=True)\n"


def _testbed(script: str) -> None:
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "testbed" / script)],
        check=True,
        env={**os.environ, "BASE": BASE, "N": "3"},
        capture_output=True,
    )


def _config(url: str, ssh: Path) -> str:
    return f"""
hosts:
  pod:
    type: tpu
    zone: us-central2-b
    project: bench
    accelerator_type: v5p-24
    version: tpu-ubuntu2204-base
    api_endpoint: {url}
    credentials: anonymous
    ssh_user: root
    identity_file: {ssh / "id_ed25519"}
    known_hosts: {ssh / "known_hosts"}
    shim_venv: {VENV}
    fake_accelerators: "tpu-v5p:4"
    boot_timeout_s: 300
"""


def _tcl_once(env: dict[str, str], repo: Path) -> float:
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [TCL, "submit", "--chip", "tpu-v5p", "-n", "12", "--", sys.executable, "hi.py"],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    seen = 0
    assert proc.stdout is not None
    for line in proc.stdout:
        if "] hi " in line:
            seen += 1
            if seen == 3:
                elapsed = time.perf_counter() - t0
                break
    else:
        raise SystemExit(f"tcl submit ended after {seen} of 3 lines: rc {proc.wait()}")
    proc.wait(120)
    return elapsed


def _ssh_once(ssh_config: Path, ips: list[str], repo: Path) -> float:
    def one(ip: str) -> None:
        remote = shlex.join([sys.executable, "-c", HI.strip()])  # ssh runs it through a shell
        out = subprocess.run(
            ["ssh", "-F", str(ssh_config), ip, remote], capture_output=True, text=True, check=True
        )
        assert out.stdout.startswith("hi"), out

    t0 = time.perf_counter()
    with ThreadPoolExecutor(len(ips)) as pool:
        list(pool.map(one, ips))
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    _testbed("ssh-down.sh")
    _testbed("ssh-up.sh")
    ssh = Path(BASE) / "ssh"
    hosts = hosts_of_testbed(ssh, 3)
    try:
        with tempfile.TemporaryDirectory() as tmp, TpuEmulator(hosts, ssh / "ssh_config") as emu:
            home, repo = Path(tmp) / "home", Path(tmp) / "repo"
            home.mkdir()
            repo.mkdir()
            subprocess.run(["git", "init", "-q", str(repo)], check=True)
            (repo / "hi.py").write_text(HI)
            config = Path(tmp) / "config.yaml"
            config.write_text(_config(emu.url, ssh))
            env = {
                **os.environ,
                "HOME": str(home),
                "TCL_STATE_DIR": str(home / "state"),
                "TCL_CONFIG": str(config),
                "NO_COLOR": "1",
            }
            try:
                subprocess.run(
                    [
                        TCL,
                        "submit",
                        "--yes",
                        "--chip",
                        "tpu-v5p",
                        "-n",
                        "12",
                        "--",
                        sys.executable,
                        "hi.py",
                    ],
                    cwd=repo,
                    env=env,
                    check=True,
                    capture_output=True,
                    timeout=600,
                )
                tcl_s, ssh_s = [], []
                for _ in range(args.reps):  # interleaved: both see the same machine load
                    ssh_s.append(_ssh_once(ssh / "ssh_config", [h.ip for h in hosts], repo))
                    tcl_s.append(_tcl_once(env, repo))
            finally:
                subprocess.run([TCL, "host", "down", "pod"], env=env, capture_output=True)
                subprocess.run([TCL, "serve", "--stop"], env=env, capture_output=True)
    finally:
        _testbed("ssh-down.sh")
    t, s = statistics.median(tcl_s), statistics.median(ssh_s)
    print(
        f"ssh to 3 workers in parallel: median {s * 1000:.0f} ms  "
        f"({', '.join(f'{x * 1000:.0f}' for x in ssh_s)})"
    )
    print(
        f"tcl submit, 3rd worker's line: median {t * 1000:.0f} ms  "
        f"({', '.join(f'{x * 1000:.0f}' for x in tcl_s)})"
    )
    print(f"ratio tcl / ssh: {t / s:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
