"""Process-executor wrapper: runs the runner, records its exit code, survives shim restarts.

Run as ``python -I -S procwrap.py --exit-file F [--cgroup DIR] --tcl-instance I --tcl-task T --
ARGV...``. With ``--cgroup`` it first moves itself into that cgroup, so the runner, the job and
whatever they start (daemons included) are all in it and the shim can end them together. It
imports only ``os``, ``signal``, ``sys`` and ``json`` (no site, no subprocess) so it adds
milliseconds to the runner's start. It leads its own session (the shim starts it with
``start_new_session``), so a SIGTERM to the group reaches the runner too; the wrapper itself
ignores it and waits, then writes the exit code atomically so a restarted shim can read it. The
``--tcl-*`` arguments only mark the process, so the shim can find it by its command line.

**Warm** (``--warm --tcl-instance I -- ARGV``): started ahead of any task with a pipe on its
stdin, it starts ``ARGV`` (``tcl-runner warm``: the runner imports what it serves with, then
waits) on a pipe of its own, and waits for one line: :func:`bind_message`, the task it now
belongs to. It joins the task's cgroup (its runner with it), takes the task's dir and log, hands
the runner its part of the line and from then on is the task's wrapper as above. End of file
before that line (the shim is gone, or no longer wants it) ends both.
"""

import json
import os
import signal
import sys

_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
WARM_FLAG = "--warm"


def bind_message(
    exit_file: str, cgroup: str | None, task_dir: str, log_file: str, runner: str
) -> bytes:
    """The line that binds a warm wrapper to a task. ``runner``: the runner's own line
    (``tcl.runner.warm.WarmBind``, JSON), passed on as it is."""
    msg = {
        "exit_file": exit_file,
        "cgroup": cgroup,
        "task_dir": task_dir,
        "log_file": log_file,
        "runner": runner,
    }
    return json.dumps(msg).encode() + b"\n"


def _join_cgroup(cgroup: str, pids: list[int]) -> None:
    fd = os.open(os.path.join(cgroup, "cgroup.procs"), os.O_WRONLY)
    try:
        for pid in pids:  # one pid per write: the kernel takes one per write(2)
            os.write(fd, f"{pid}\n".encode())
    finally:
        os.close(fd)


def _read_line(fd: int) -> bytes:
    """One line from ``fd``, byte by byte (nothing past it is consumed); b"" at end of file."""
    out = bytearray()
    while True:
        try:
            b = os.read(fd, 1)
        except InterruptedError:
            continue
        if not b:
            return b""
        if b == b"\n":
            return bytes(out)
        out += b


def _start(cmd: list[str], stdin: int | None = None) -> int:
    pid = os.fork()
    if pid == 0:  # child: default signal handling, then become the runner
        for sig in _SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        if stdin is not None:
            os.dup2(stdin, 0)
            os.close(stdin)
        try:
            os.execvp(cmd[0], cmd)
        except OSError as e:
            os.write(2, f"cannot start {cmd[0]}: {e}\n".encode())
        os._exit(127)
    return pid


def _warm(cmd: list[str]) -> tuple[int, str] | None:
    """Start the runner and wait to be bound; returns (runner pid, exit file), or None when
    the shim let go of this wrapper unbound (the runner is ended)."""
    r, w = os.pipe()
    pid = _start(cmd, stdin=r)
    os.close(r)
    line = _read_line(0)
    if not line:
        os.close(w)  # the runner reads end of file and exits; make sure of it
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return None
    bind = json.loads(line)
    if bind["cgroup"]:
        _join_cgroup(bind["cgroup"], [os.getpid(), pid])
    os.chdir(bind["task_dir"])
    log = os.open(bind["log_file"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 2)
    os.close(log)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.write(w, bind["runner"].encode() + b"\n")
    os.close(w)
    return pid, bind["exit_file"]


def main(argv: list[str]) -> int:
    if "--" not in argv or ("--exit-file" not in argv and WARM_FLAG not in argv):
        os.write(2, b"usage: procwrap.py (--exit-file F | --warm) [--tcl-* X ...] -- ARGV\n")
        return 2
    split = argv.index("--")
    opts, cmd = argv[:split], argv[split + 1 :]
    for sig in _SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    if WARM_FLAG in opts:
        bound = _warm(cmd)
        if bound is None:
            return 0
        pid, exit_file = bound
    else:
        exit_file = opts[opts.index("--exit-file") + 1]
        if "--cgroup" in opts:
            _join_cgroup(opts[opts.index("--cgroup") + 1], [os.getpid()])
        pid = _start(cmd)
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
