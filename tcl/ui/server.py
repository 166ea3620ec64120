"""Serving ``tcl ui``: uvicorn on 127.0.0.1, a fresh token per start, the URL printed first.

The token lives only in this process's memory and in the URL printed on stdout (its first
line, flushed before anything else): it is never written to a file or a log. The socket is
bound before the URL is printed, so the URL answers as soon as it is read.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import webbrowser
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

import uvicorn

from tcl.tokenfile import new_token
from tcl.ui.app import create_app
from tcl.ui.context import Ui, UiSettings

if TYPE_CHECKING:
    from tcl.control.config import Config
    from tcl.control.store import Store

LOOPBACK = "127.0.0.1"


def bind(port: int) -> socket.socket:
    """A listening socket on loopback (``port`` 0: any free one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # accepted connections inherit it: a reply's head and body are not held for a delayed ACK
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((LOOPBACK, port))  # loopback only; the token guards it from other local users
    sock.listen(128)
    return sock


def page_url(port: int, token: str) -> str:
    return f"http://{LOOPBACK}:{port}/?token={token}"


async def serve(
    store: Store,
    config: Callable[[], Config],
    *,
    port: int = 0,
    allow_actions: bool = False,
    open_browser: bool = True,
    start_scheduler: Callable[[], str] | None = None,
    out: TextIO | None = None,
) -> None:
    """Serve until interrupted (Ctrl-C, SIGTERM)."""
    sock = bind(port)
    bound = int(sock.getsockname()[1])
    settings = UiSettings(token=new_token(), allow_actions=allow_actions, port=bound)
    ui = Ui(settings, store, config, start_scheduler)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(ui),
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=3,
            ws="websockets-sansio",
            proxy_headers=False,  # nothing sits in front of it: X-Forwarded-* is never trusted
            server_header=False,
        )
    )
    url = page_url(bound, settings.token)
    stream = out or sys.stdout
    stream.write(url + "\n")  # the first line: scripts and tests read it
    stream.flush()
    if open_browser:
        # off the loop: finding and starting a browser can take a moment
        asyncio.get_running_loop().run_in_executor(None, webbrowser.open, url)
    try:
        await server.serve(sockets=[sock])
    finally:
        with contextlib.suppress(Exception):
            await ui.aclose()
        sock.close()
