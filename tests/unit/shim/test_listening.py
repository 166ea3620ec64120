"""A forked runner's task is reported running once its runner listens (tcl.shim.executors.ports):
the launch's first request then waits in the runner's backlog instead of being refused."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time

from tcl.shim.executors.ports import free_port, listening


async def test_it_answers_once_the_port_is_bound_later() -> None:
    port = free_port()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    async def bind_later() -> None:
        await asyncio.sleep(0.1)
        sock.bind(("127.0.0.1", port))
        sock.listen(8)

    binder = asyncio.create_task(bind_later())
    try:
        assert await listening(port, os.getpid(), 30.0)
        assert binder.done()  # answered after the bind, not before it
    finally:
        await binder
        sock.close()


async def test_a_runner_gone_before_it_listened_is_not_waited_for() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    t0 = time.monotonic()
    assert not await listening(free_port(), proc.pid, 30.0)
    assert time.monotonic() - t0 < 5.0  # not the 30 s


async def test_a_port_nobody_binds_is_given_up_after_the_wait() -> None:
    assert not await listening(free_port(), os.getpid(), 0.05)
