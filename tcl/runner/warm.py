"""``tcl-runner warm``: a runner started before its task exists, so a submit does not wait for
a Python start.

The shim's process executor keeps a few of these per host (``tcl.shim.executors.warmpool``).
Each imports what a serving runner needs (the app, uvicorn and its protocols: most of a start's
0.2 s), then blocks on one line on its stdin: a ``WarmBind`` (``tcl.common.api``, JSON), the
task it now serves. It takes that task's log as its stdout and stderr, its working dir and
environment, and from then on is ``tcl-runner serve`` with the bind's arguments: nothing of a
runner's behaviour differs from a cold one's. End of file before the line (nobody bound it)
exits 0. The line comes through a pipe, never a file or the command line: the environment holds
the job's secrets.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys

from tcl.common.api import WarmBind

# What ``serve`` would import on its way to the first answer (``uvicorn.Config.load`` imports
# its protocol implementations by name): imported while nobody waits.
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


def wait_for_bind() -> WarmBind | None:
    """Block until the shim binds this runner; None at end of file."""
    line = sys.stdin.buffer.readline()
    if not line.strip():
        return None
    return WarmBind.model_validate_json(line)


def take(bind: WarmBind) -> None:
    """Become the bound task's runner: its log, its dir, its environment."""
    fd = os.open(bind.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.chdir(bind.cwd)
    os.environ.update(bind.env)


def main() -> list[str] | None:
    """Preload, wait, take the task; the arguments to serve it with (None: never bound)."""
    preload()
    bind = wait_for_bind()
    if bind is None:
        return None
    take(bind)
    return bind.argv
