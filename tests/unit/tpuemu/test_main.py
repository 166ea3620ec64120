"""``python -m tests.tpuemu --testbed DIR`` (the emulator for manual use) starts and serves:
it crashed on ``args.hosts_of_testbed`` (the flag is ``--testbed-hosts``)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from tests.notebook import REPO


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_emulator_serves_the_testbed_s_hosts(tmp_path: Path) -> None:
    port = _free_port()
    argv = [sys.executable, "-m", "tests.tpuemu", "--port", str(port), "--testbed", str(tmp_path)]
    proc = subprocess.Popen(
        [*argv, "--testbed-hosts", "2"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "TPU API emulator on" in first, first + proc.stdout.read()
        url = f"http://127.0.0.1:{port}/v2/projects/p/locations/us-central2-b/nodes"
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.status == 200 and isinstance(json.loads(resp.read()), dict)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
