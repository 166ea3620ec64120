"""Process-executor wrapper: runs the runner, records its exit code, survives shim restarts.

Run as ``python -I procwrap.py --exit-file F --tcl-instance I --tcl-task T -- ARGV...``; stdlib
only, so it starts in milliseconds. It leads its own session (the shim starts it with
``start_new_session``), so a SIGTERM to the group reaches the runner too; the wrapper itself
ignores it and waits, then writes the exit code atomically so a restarted shim can read it.
The ``--tcl-*`` arguments only mark the process, so the shim can find it by its command line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("usage: procwrap.py --exit-file F [--tcl-* X ...] -- ARGV", file=sys.stderr)
        return 2
    split = argv.index("--")
    opts, cmd = argv[:split], argv[split + 1 :]
    exit_file = opts[opts.index("--exit-file") + 1]
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    try:
        child = subprocess.Popen(cmd, restore_signals=True,
                                 preexec_fn=_default_signals)
    except OSError as e:
        print(f"cannot start {cmd[0]}: {e}", file=sys.stderr)
        code = 127
    else:
        rc = child.wait()
        code = 128 - rc if rc < 0 else rc
    tmp = f"{exit_file}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{code}\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, exit_file)
    return code


def _default_signals() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
