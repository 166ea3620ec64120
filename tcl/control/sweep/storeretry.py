"""A scheduler's writes through state store outages: asked again after a backoff until the
store takes them, and each error it survives told to its ``on_error`` (its supervisor shows
them in the status)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tcl.control.backoff import backoff_s
from tcl.control.errors import StoreError

STORE_RETRY_CAP_S = 10.0  # the state store unreachable: ask again within this long


class StoreRetry:
    def __init__(self, first_s: float, on_error: Callable[[BaseException], None] | None) -> None:
        self.first_s = first_s  # the state store unreachable: first wait before asking again
        self.on_error = on_error

    def error(self, e: BaseException) -> None:
        if self.on_error is not None:
            self.on_error(e)

    async def until_stored(self, write: Callable[..., object], *args: Any) -> None:
        """Run ``write(*args)`` (in a thread) until the state store takes it: an outage delays
        the entry's end, never loses it (cancelled: the lease expires and the next scheduler
        that adopts the entry records it)."""
        failures = 0
        while True:
            try:
                await asyncio.to_thread(write, *args)
                return
            except StoreError as e:
                self.error(e)
                failures += 1
                await asyncio.sleep(self.wait_s(failures))

    def wait_s(self, failures: int) -> float:
        return backoff_s(failures - 1, self.first_s, STORE_RETRY_CAP_S)
