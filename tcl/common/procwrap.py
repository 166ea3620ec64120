"""Process-executor wrapper: runs the runner, records its exit code, survives shim restarts.

Run as ``python -I -S procwrap.py --exit-file F [--cgroup DIR] --tcl-instance I --tcl-task T --
ARGV...``. With ``--cgroup`` it first moves itself into that cgroup, so the runner, the job and
whatever they start (daemons included) are all in it and the shim can end them together. It
imports only ``os``, ``signal`` and ``sys`` (no site, no subprocess) so it adds milliseconds to
the runner's start. It leads its own session (the shim starts it with ``start_new_session``), so
a SIGTERM to the group reaches the runner too; the wrapper itself ignores it and waits, then
writes the exit code atomically so a restarted shim can read it. The ``--tcl-*`` arguments only
mark the process, so the shim can find it by its command line.

The runner's fork server (``tcl.runner.forkserver``) makes the same wrapper of a forked child
with these functions: in ``tcl.common``, as both agents use it.
"""

import os
import signal
import sys

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def ignore_stop_signals() -> None:
    """The wrapper outlives its runner's stop: it must record how the runner ended."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def default_stop_signals() -> None:
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)


def join_cgroup(cgroup: str, pid: int) -> None:
    fd = os.open(os.path.join(cgroup, "cgroup.procs"), os.O_WRONLY)
    try:
        os.write(fd, f"{pid}\n".encode())
    finally:
        os.close(fd)


def wait_and_record(pid: int, exit_file: str) -> int:
    """Wait for the runner; write its exit code (128 + signal when killed) atomically."""
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


def main(argv: list[str]) -> int:
    if "--" not in argv or "--exit-file" not in argv:
        os.write(2, b"usage: procwrap.py --exit-file F [--tcl-* X ...] -- ARGV\n")
        return 2
    split = argv.index("--")
    opts, cmd = argv[:split], argv[split + 1 :]
    exit_file = opts[opts.index("--exit-file") + 1]
    if "--cgroup" in opts:
        join_cgroup(opts[opts.index("--cgroup") + 1], os.getpid())
    ignore_stop_signals()
    pid = os.fork()
    if pid == 0:  # child: default signal handling, then become the runner
        default_stop_signals()
        try:
            os.execvp(cmd[0], cmd)
        except OSError as e:
            os.write(2, f"cannot start {cmd[0]}: {e}\n".encode())
        os._exit(127)
    return wait_and_record(pid, exit_file)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
