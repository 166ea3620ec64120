"""The agents' HTTP clients share one TLS context (issue 29): httpx made one per client,
loading the CA bundle each time (~30 ms of CPU), which was 14 % of a busy sweep daemon's CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tcl.common.tls import shared_context
from tcl.runner.client import RunnerClient
from tcl.shim.client import ShimClient
from tcl.shim.probe import RunnerProbe


def _context_of(http: Any) -> object:
    return http._transport._pool._ssl_context  # httpx -> httpcore's pool


async def test_every_agent_client_uses_the_shared_context(tmp_path: Path) -> None:
    clients = [
        RunnerClient("http://127.0.0.1:1", "t" * 43)._http,
        ShimClient("http://127.0.0.1:1", "t" * 43)._http,
        ShimClient("http://localhost", "t" * 43, uds=tmp_path / "shim.sock")._http,
        RunnerProbe(silence_limit_s=30)._http,
    ]
    try:
        assert all(_context_of(c) is shared_context() for c in clients)
    finally:
        for c in clients:
            await c.aclose()
