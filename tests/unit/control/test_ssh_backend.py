"""The ssh backend's shim client under concurrent callers (`tcl ps` refreshes runs at once)."""

from __future__ import annotations

import asyncio
from typing import Any

from tcl.control.backends.ssh import SshShimHost
from tcl.control.config import SshHost
from tcl.control.transport.ssh import RemoteResult, SshPool


class SlowPool(SshPool):
    """Answers like a host over a slow link: every call yields to the other callers."""

    def __init__(self) -> None:
        super().__init__()
        self.runs = 0

    async def forward(self, target: Any, remote_port: int, remote_host: str = "127.0.0.1") -> int:
        await asyncio.sleep(0.01)
        return 40000

    async def run(self, target: Any, argv: list[str], **_: Any) -> RemoteResult:
        self.runs += 1
        await asyncio.sleep(0.05)
        return RemoteResult(0, "/srv/tcl\n" + "t" * 43 + "\n", "")


def test_concurrent_callers_share_one_open_shim_client() -> None:
    async def go() -> None:
        pool = SlowPool()
        backend = SshShimHost("gpu1", SshHost(type="ssh", ssh="gpu1"), pool)
        clients = await asyncio.gather(*(backend.shim() for _ in range(8)))
        assert all(c is clients[0] for c in clients)
        assert pool.runs == 1  # the shim dir and token were read once
        http = clients[0]._client._http  # type: ignore[attr-defined]
        assert not http.is_closed
        await backend.aclose()

    asyncio.run(go())
