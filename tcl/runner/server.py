"""Serving the app with uvicorn on a socket we bind ourselves (so port 0 works and the chosen
port can be reported before the first request)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tcl.atomic import write_atomic
from tcl.runner.api import RunnerState
from tcl.runner.service import Runner

if TYPE_CHECKING:
    import uvicorn


def parse_addr(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"address must be HOST:PORT, got {addr!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # replies go out whole at once: without it, a reply written in two parts (its head, then
    # its body) on a kept-alive connection waits for the peer's delayed ACK (~40 ms a call)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(512)
    sock.set_inheritable(False)
    return sock


class Server:
    """uvicorn around ``create_app(runner)``; ``serve`` returns when ``shutdown`` is called."""

    def __init__(
        self, runner: Runner, host: str, port: int, token: str, port_file: Path | None = None
    ) -> None:
        import uvicorn

        from tcl.runner.app import create_app

        self.sock = bind(host, port)
        self.port = int(self.sock.getsockname()[1])
        self.port_file = port_file
        config = uvicorn.Config(
            create_app(runner, token),
            log_level="warning",
            lifespan="off",
            ws="websockets-sansio",
            access_log=False,
            # Log text compresses well, but deflating every event costs the runner more CPU
            # than the job's output costs to produce; SSH can compress the tunnel instead.
            ws_per_message_deflate=False,
            timeout_graceful_shutdown=2,
        )
        self._server = _server_without_signal_handlers(config)

    async def serve(self) -> None:
        if self.port_file is not None:
            write_atomic(self.port_file, f"{self.port}\n".encode(), mode=0o644)
        await self._server.serve(sockets=[self.sock])

    def shutdown(self) -> None:
        self._server.should_exit = True

    async def started(self) -> None:
        while not self._server.started:
            await asyncio.sleep(0.01)


def _server_without_signal_handlers(config: uvicorn.Config) -> uvicorn.Server:
    """A uvicorn server that leaves signals alone. uvicorn's own handlers (``capture_signals``)
    would replace the runner's and exit at once, cutting short a job that is checkpointing
    and orphaning one that ignores SIGTERM; ``StopOnSignals`` shuts the server down instead,
    once the job is final."""
    import uvicorn

    class QuietServer(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

    return QuietServer(config)


def serve(
    runner: Runner,
    host: str,
    port: int,
    token: str,
    port_file: Path | None = None,
    linger_s: float | None = None,
    start_timeout_s: float | None = None,
) -> int:
    """``tcl-runner serve``: serve until a stop signal has ended the job (``signals.py``) or,
    with ``linger_s``, until that long after the job has ended. Returns the exit status: 143
    when a signal terminated the run, else the job's exit code when it ended, else 0."""
    from tcl.runner.signals import StopOnSignals

    server = Server(runner, host, port, token, port_file)
    stopper = StopOnSignals(runner, runner.config.stop_grace_s, on_final=server.shutdown)

    async def linger() -> None:
        assert linger_s is not None
        await runner.finished()
        await asyncio.sleep(linger_s)  # followers and pollers read the last events
        server.shutdown()

    async def abandon() -> None:
        assert start_timeout_s is not None
        await asyncio.sleep(start_timeout_s)
        if runner.state in (RunnerState.WAITING_SPEC, RunnerState.WAITING_CODE, RunnerState.READY):
            runner.say(f"no job started within {start_timeout_s:g} s: the submit is gone; ending")
            await asyncio.to_thread(runner.stop, 0.0)

    async def go() -> None:
        async with stopper:
            watchers = []
            if linger_s is not None:
                watchers.append(asyncio.create_task(linger()))
            if start_timeout_s is not None:
                watchers.append(asyncio.create_task(abandon()))
            try:
                await server.serve()
            finally:
                for w in watchers:
                    w.cancel()

    asyncio.run(go())
    return stopper.exit_status(default=0)
