"""A request through httpx looks up no module.

httpcore asks ``import sniffio`` in every lock, event and stream close of a request
(``current_async_library``). anyio 4.11 and later no longer install sniffio, and Python does not
cache a failed import: without sniffio each of those calls searched every ``sys.path`` entry
again (encode/httpcore#1103). tcl's daemon makes several such requests per run it places and
follows (4 % of its busy CPU in a 400-entry sweep), so tcl depends on sniffio itself.
"""

from __future__ import annotations

import asyncio
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

import httpx

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class _Lookups(importlib.abc.MetaPathFinder):
    """Records each module name the import system is asked to find (it finds none itself)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        self.names.append(fullname)
        return None


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while await reader.readuntil(b"\r\n\r\n"):
            writer.write(RESPONSE)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionResetError):
        pass
    writer.close()


async def _lookups_during_requests(n: int) -> list[str]:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    lookups = _Lookups()
    try:
        async with httpx.AsyncClient() as client:
            assert (await client.get(url)).text == "ok"  # warm: what a first request imports
            sys.meta_path.insert(0, lookups)
            try:
                for _ in range(n):
                    assert (await client.get(url)).text == "ok"
            finally:
                sys.meta_path.remove(lookups)
    finally:
        server.close()
        await server.wait_closed()
    return lookups.names


def test_requests_after_the_first_look_up_no_module() -> None:
    assert asyncio.run(_lookups_during_requests(20)) == []
