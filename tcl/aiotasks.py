"""A small asyncio helper shared by the agents and the control plane (stdlib only)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any


async def until_first(*coros: Coroutine[Any, Any, None]) -> None:
    """Run ``coros`` together until the first returns (or raises); cancel and reap the rest.

    The two directions of a byte relay: when one side closes, the other is done too."""
    tasks = {asyncio.create_task(c) for c in coros}
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
