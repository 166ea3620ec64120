"""``tcl-runner forkserver``: one process per shim that has imported everything a runner serves
with, and forks a runner for each task, so a submit does not wait for a Python start and a busy
host does not pay 0.2 s of CPU per runner (a sweep on 2 cores is bound by exactly that).

Protocol (the shim's process executor, ``tcl.shim.executors.forkclient``): a
``tcl.common.api.ForkRequest`` per line on stdin, answered by the forked wrapper's pid on a line
of stdout (``error: …`` for a request it cannot read). End of file: it exits; the runners it
forked live on, each in its own session.

Each request forks a **wrapper** (the same as ``procwrap.py``: it leads a new session, joins the
task's cgroup, ignores stop signals, waits for its runner and records the exit code), which forks
the **runner**: it takes the request's environment and runs ``tcl-runner`` with the request's
arguments, exactly as a cold start would. The server is single-threaded and never runs an event
loop, so forking it is safe; the kernel reaps the wrappers (SIGCHLD ignored).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import signal
import sys
import traceback

from pydantic import ValidationError

from tcl.common import procwrap
from tcl.common.api import ForkRequest

# What ``serve`` would import on its way to the first answer (``uvicorn.Config.load`` imports
# its protocol implementations by name): imported once, by the server.
PRELOAD = (
    "tcl.runner.server",
    "tcl.runner.service",
    "tcl.runner.app",
    "tcl.runner.signals",
    "tcl.runner.reaper",
    "tcl.tokenfile",
    "uvicorn",
    "uvicorn.lifespan.off",
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.websockets.websockets_sansio_impl",
    "uvloop",
)


def preload() -> None:
    for name in PRELOAD:
        with contextlib.suppress(ImportError):  # an optional protocol (httptools) not installed
            importlib.import_module(name)
    # what a ``tcl.jobs`` job in a project is lent (every fork inherits it, read once here)
    from tcl.jobs.deps import JOB_DEPENDENCIES
    from tcl.runner import lend

    lend.lent_paths(tuple(JOB_DEPENDENCIES.values()))


def serve_forks() -> None:
    preload()
    # every fork inherits the preloaded objects: frozen, a runner's full collections skip them
    # (and do not write to the pages they share with the server)
    gc.freeze()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the wrappers are reaped by the kernel
    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        try:
            req = ForkRequest.model_validate_json(line)
        except ValidationError as e:
            out.write(f"error: {e.errors()[0]['loc']} {e.errors()[0]['msg']}\n".encode())
            out.flush()
            continue
        out.flush()
        sys.stderr.flush()
        # The answer waits until the wrapper leads its session: a stop sent to its group the
        # moment the shim has the pid must reach it (CI: a group not yet there, a kill that
        # reached nobody, and a shim that waited for the wrapper's end forever).
        led_r, led_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(led_r)
            _wrapper(req, led_w)  # never returns
        os.close(led_w)
        os.read(led_r, 1)  # end of file: the session is led (or the wrapper is gone)
        os.close(led_r)
        out.write(f"{pid}\n".encode())
        out.flush()


def _wrapper(req: ForkRequest, led: int) -> None:
    """In the forked child: become the task's wrapper (``led`` closed once it leads its session
    and ignores stop signals), fork its runner, record how it ended."""
    code = 127
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # this one waits for its runner
        os.setsid()
        procwrap.ignore_stop_signals()
        os.close(led)
        if req.cgroup:
            procwrap.join_cgroup(req.cgroup, os.getpid())
        _redirect(req.log_file)
        os.chdir(req.task_dir)
        pid = os.fork()
        if pid == 0:
            procwrap.default_stop_signals()
            os._exit(_runner(req))
        code = procwrap.wait_and_record(pid, req.exit_file)
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
            sys.stderr.flush()
    os._exit(code)


def _redirect(log_file: str) -> None:
    """stdin from /dev/null (not the server's requests), stdout and stderr to the task's log."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _runner(req: ForkRequest) -> int:
    """In the wrapper's child: ``tcl-runner ARGV`` with the request's environment."""
    from tcl.runner.main import main

    os.environ.update(req.env)
    code = 0
    try:
        main(req.argv)
    except SystemExit as e:
        if isinstance(e.code, int):
            code = e.code
        elif e.code is not None:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    return code
