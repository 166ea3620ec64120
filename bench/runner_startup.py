"""Runner start-up: process start -> healthcheck answers, against `python -c pass` measured
in the same run (median of N each).

    uv run python bench/runner_startup.py [--runs N]

Target: < 0.5 s absolute on this machine.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def python_pass() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - t0


def healthy(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"GET /api/healthcheck HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


def runner_start(exe: list[str]) -> float:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="tcl-bench-start-") as tmp:
        t0 = time.perf_counter()
        proc = subprocess.Popen([*exe, "serve", "--port", str(port), "--state-dir", tmp])
        try:
            while not healthy(port):
                if proc.poll() is not None:
                    raise SystemExit(f"runner exited with {proc.returncode}")
                time.sleep(0.002)
            return time.perf_counter() - t0
        finally:
            proc.terminate()
            proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    script = shutil.which("tcl-runner", path=str(Path(sys.executable).parent))
    exe = [script] if script else [sys.executable, "-m", "tcl.runner.main"]
    base = statistics.median(python_pass() for _ in range(args.runs))
    start = statistics.median(runner_start(exe) for _ in range(args.runs))
    print(f"python -c pass:                 {base * 1e3:.0f} ms (median of {args.runs})")
    print(f"tcl-runner serve -> healthcheck: {start * 1e3:.0f} ms (median of {args.runs})")
    print(f"ratio runner/python: {start / base:.1f}  (target < 500 ms absolute)")


if __name__ == "__main__":
    main()
