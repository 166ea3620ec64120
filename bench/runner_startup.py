"""Runner start-up: process start -> healthcheck answers, against `python -c pass` measured
in the same run (median of N each).

    uv run python bench/runner_startup.py [--runs N]

Measured twice: with bytecode caches (as in the runner image, where pip compiles at install;
here a throw-away PYTHONPYCACHEPREFIX warmed by one uncounted start), and as this environment
runs it (with PYTHONDONTWRITEBYTECODE=1 and a uv-installed venv, every start compiles every
module from source).

Target: < 0.5 s absolute on this machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from _runner_util import write_token_file


def python_pass(env: Mapping[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True, env=env)
    return time.perf_counter() - t0


def healthy(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"GET /api/healthcheck HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def runner_start(exe: list[str], env: Mapping[str, str]) -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="tcl-bench-start-") as tmp:
        _, token_file = write_token_file(Path(tmp))
        t0 = time.perf_counter()
        argv = [*exe, "serve", "--port", str(port), "--state-dir", tmp]
        proc = subprocess.Popen([*argv, "--token-file", str(token_file)], env=env)
        try:
            while not healthy(port):
                if proc.poll() is not None:
                    raise SystemExit(f"runner exited with {proc.returncode}")
                time.sleep(0.002)
            return time.perf_counter() - t0
        finally:
            proc.terminate()
            proc.wait(10)


def measure(exe: list[str], env: Mapping[str, str], runs: int, label: str) -> None:
    base = statistics.median(python_pass(env) for _ in range(runs))
    start = statistics.median(runner_start(exe, env) for _ in range(runs))
    print(f"{label}:")
    print(f"  python -c pass:                  {base * 1e3:.0f} ms (median of {runs})")
    print(f"  tcl-runner serve -> healthcheck: {start * 1e3:.0f} ms (median of {runs})")
    print(f"  ratio runner/python: {start / base:.1f}  (target < 500 ms absolute)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    script = shutil.which("tcl-runner", path=str(Path(sys.executable).parent))
    exe = [script] if script else [sys.executable, "-m", "tcl.runner.main"]
    with tempfile.TemporaryDirectory(prefix="tcl-bench-pycache-") as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = cache
        runner_start(exe, env)  # warm the bytecode cache (not counted)
        measure(exe, env, args.runs, "with bytecode caches (as in the runner image)")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        measure(exe, dict(os.environ), args.runs, "as this environment runs it (no .pyc)")


if __name__ == "__main__":
    main()
