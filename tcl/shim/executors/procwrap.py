"""Process-executor wrapper: runs the runner, records its exit code, survives shim restarts.

Run as ``python -I -S procwrap.py --exit-file F [--cgroup DIR] --tcl-instance I --tcl-task T --
ARGV...``. With ``--cgroup`` it first moves itself into that cgroup, so the runner, the job and
whatever they start (daemons included) are all in it and the shim can end them together. It
imports only ``os``, ``signal`` and ``sys`` (no site, no subprocess) so it adds milliseconds to
the runner's start. It leads its own session (the shim starts it with ``start_new_session``), so
a SIGTERM to the group reaches the runner too; the wrapper itself ignores it and waits, then
writes the exit code atomically so a restarted shim can read it. The ``--tcl-*`` arguments only
mark the process, so the shim can find it by its command line.
"""

import os
import signal
import sys

_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def main(argv: list[str]) -> int:
    if "--" not in argv or "--exit-file" not in argv:
        os.write(2, b"usage: procwrap.py --exit-file F [--tcl-* X ...] -- ARGV\n")
        return 2
    split = argv.index("--")
    opts, cmd = argv[:split], argv[split + 1 :]
    exit_file = opts[opts.index("--exit-file") + 1]
    if "--cgroup" in opts:
        fd = os.open(os.path.join(opts[opts.index("--cgroup") + 1], "cgroup.procs"), os.O_WRONLY)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)
    for sig in _SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    pid = os.fork()
    if pid == 0:  # child: default signal handling, then become the runner
        for sig in _SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(cmd[0], cmd)
        except OSError as e:
            os.write(2, f"cannot start {cmd[0]}: {e}\n".encode())
        os._exit(127)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    code = 128 - code if code < 0 else code
    tmp = f"{exit_file}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, f"{code}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, exit_file)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
