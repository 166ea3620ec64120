"""A sweep whose `tcl serve` is SIGKILLed again and again (the local host, 8 fake GPUs): every
entry runs exactly once, none fails for it, none is left stuck, and every GPU is free at the
end. Each kill leaves the dead daemon's entries and runs leased; the next daemon takes them once
their leases lapse (3 s here) and follows the runs that went on meanwhile.

``TCL_TEST_KILL_ENTRIES`` (default 120) sets the size: the issue's scale is 300.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.control.test_sweep_local import Sweep, _ended, _manifest
from tests.integration.tclcli import start_tcl

ENTRIES = int(os.environ.get("TCL_TEST_KILL_ENTRIES", "120"))
KILLS = 5


@pytest.fixture
def sweep(tmp_path: Path) -> Iterator[Sweep]:
    s = Sweep(tmp_path, gpus=8, TCL_SERVE_LEASE_S="3")
    try:
        yield s
    finally:
        s.close()


def _daemon_pid(s: Sweep) -> int | None:
    sock = s.home / "state" / "serve" / "daemon.sock"
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), timeout=10) as c:
            return int(c.get("http://localhost/api/healthcheck").json()["pid"])
    except (httpx.HTTPError, OSError):
        return None


def test_a_sweep_survives_its_daemon_killed_five_times(sweep: Sweep) -> None:
    s = sweep
    rng = random.Random(28)
    rows = [
        {"job_id": f"e{i:03d}", "job": f"e{i:03d}", "fail_until": 0, "sleep_s": rng.uniform(1, 3)}
        for i in range(ENTRIES)
    ]
    s.add("kills", _manifest(s.out.parent / "m.json", rows))
    serve: subprocess.Popen[str] | None = None
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(3, 8))  # a kill at a random moment of the sweep
            pid = _daemon_pid(s)
            assert pid is not None, (s.home / "serve-fg.log").read_text()[-3000:]
            os.kill(pid, signal.SIGKILL)
            if serve is not None:
                serve.wait(10)
            with (s.home / "serve-fg.log").open("a") as log:  # read, or a full pipe blocks it
                serve = start_tcl(["serve"], s.env(), s.repo, stderr=log)
        s.wait("kills", _ended, 600)
        st = s.status("kills")
        assert st["counts"]["done"] == ENTRIES, st
        ran = Counter(r[0] for r in s.runs())
        assert len(ran) == ENTRIES and set(ran.values()) == {1}, ran.most_common(3)
        starts = {p.name: p.read_text() for p in s.out.glob("count-*")}
        assert set(starts.values()) == {"1"}, [k for k, v in starts.items() if v != "1"]
        with s.local_shim() as shim:
            gpus = shim.get("/host").json()["accelerators"]
        assert len(gpus) == 8 and all(g["task_id"] is None for g in gpus), gpus
        runs = json.loads(s.tcl("ps", "-a", "--matrix", "kills", "--json").stdout)
        assert {r["state"] for r in runs} == {"succeeded"}, Counter(r["state"] for r in runs)
    finally:
        if serve is not None and serve.poll() is None:
            serve.send_signal(signal.SIGTERM)
            serve.communicate(timeout=60)
