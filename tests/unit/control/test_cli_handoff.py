"""The handed-off ``tcl`` process's signal relay: a signal that comes before the forked
command's pid is known is held and delivered once it is (a Ctrl-C while the request was being
sent killed the client with a traceback and left the command running: CI11)."""

from __future__ import annotations

import signal
import subprocess
import sys

from tcl.cli.handoff import _Relay


def test_a_signal_before_the_pid_is_held_then_forwarded() -> None:
    relay = _Relay()
    relay.forward(signal.SIGTERM, None)
    assert relay.held == [signal.SIGTERM]
    cmd = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        relay.start(cmd.pid)
        assert cmd.wait(30) == -signal.SIGTERM
        assert relay.held == []
    finally:
        if cmd.poll() is None:
            cmd.kill()
            cmd.wait()


def test_a_signal_after_the_pid_goes_straight_to_the_command() -> None:
    relay = _Relay()
    cmd = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        relay.start(cmd.pid)
        relay.forward(signal.SIGHUP, None)
        assert cmd.wait(30) == -signal.SIGHUP
    finally:
        if cmd.poll() is None:
            cmd.kill()
            cmd.wait()
