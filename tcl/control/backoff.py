"""Jittered exponential backoff (shared by the SSH pool and log following), and the pause of
a loop between its passes."""

from __future__ import annotations

import asyncio
import random


def backoff_s(attempt: int, base_s: float = 0.25, cap_s: float = 5.0) -> float:
    """Full-jitter exponential backoff for the ``attempt``-th retry (0-based)."""
    return random.uniform(0, min(cap_s, base_s * 2**attempt))


async def pause(wake: asyncio.Event, stopping: asyncio.Event, timeout_s: float) -> None:
    """Until ``wake`` or ``stopping`` is set, at most ``timeout_s``: a loop's pause between
    passes (woken early when there is work, at once when it stops)."""
    woken = asyncio.ensure_future(wake.wait())
    stopped = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait({woken, stopped}, timeout=timeout_s, return_when="FIRST_COMPLETED")
    finally:
        woken.cancel()
        stopped.cancel()
