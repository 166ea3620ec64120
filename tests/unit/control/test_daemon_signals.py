"""``tcl serve``'s stop signals (tcl.control.daemon.server.StopSignals): the daemon's cleanup
runs first, then the signal ends it, through the handler the process had before (coverage's,
which saves its data on SIGTERM: with the default handler put back instead, every daemon the
tests stopped lost its coverage, and CI fell under its floor)."""

from __future__ import annotations

import signal
import subprocess
import sys

SCRIPT = """
import os, signal, sys
from tcl.control.daemon.server import StopSignals
{before}
with StopSignals() as s:
    os.kill(os.getpid(), signal.{sig})
    print("cleanup ran", flush=True)
print("not reached", flush=True)
"""
OWN = """
def own(sig, frame):
    print("own handler", flush=True)
    sys.exit(7)
signal.signal(signal.SIGTERM, own)
"""


def _run(sig: str, before: str = "") -> subprocess.CompletedProcess[str]:
    code = SCRIPT.format(before=before, sig=sig)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_handler_the_process_had_gets_the_signal_after_the_cleanup() -> None:
    res = _run("SIGTERM", OWN)
    assert (res.stdout, res.returncode) == ("cleanup ran\nown handler\n", 7), res.stderr


def test_with_no_handler_of_its_own_the_signal_ends_the_process() -> None:
    for sig in ("SIGTERM", "SIGINT"):
        res = _run(sig)
        assert res.stdout == "cleanup ran\n", res.stderr
        assert res.returncode == -getattr(signal, sig), (sig, res.stderr)
