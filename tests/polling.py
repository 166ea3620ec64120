"""Wait for something to happen by polling it until a deadline: the one way tests wait.

A fixed sleep ("sleep 0.5, then assert it is unmounted") is either too short on a loaded machine
(the test flakes) or too long on an idle one (the suite crawls). These return as soon as the
predicate holds, so their timeouts can be generous (30-60 s): they are only reached when the
thing never happens, and then the AssertionError names what was awaited and the last value seen.

    pid = wait_until(lambda: read_pid(path), 30, "the task's pid file")
    await await_until(lambda: mounted_fstype(mp, table) is None, 30, "the idle unmount")
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

T = TypeVar("T")

_FIRST_INTERVAL_S = 0.01
_MAX_INTERVAL_S = 0.2


def _timed_out(what: str, timeout_s: float, last: object, error: BaseException | None) -> str:
    seen = f"last raised {error!r}" if error is not None else f"last value {last!r}"
    return f"waited {timeout_s:g} s for {what}: {seen}"


def wait_until(
    predicate: Callable[[], T],
    timeout_s: float,
    what: str,
    *,
    ignore: tuple[type[Exception], ...] = (),
) -> T:
    """Call ``predicate`` until it returns something truthy, and return that.

    Exceptions of the types in ``ignore`` count as "not yet" (a server that is not listening
    yet); any other propagates. Past ``timeout_s`` raises AssertionError naming ``what``.
    """
    deadline = time.monotonic() + timeout_s
    interval = _FIRST_INTERVAL_S
    while True:
        error: Exception | None = None
        value: T | None = None
        try:
            value = predicate()
        except ignore as e:
            error = e
        if error is None and value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(what, timeout_s, value, error))
        time.sleep(interval)
        interval = min(interval * 2, _MAX_INTERVAL_S)


@overload
async def await_until(
    predicate: Callable[[], Awaitable[T]],
    timeout_s: float,
    what: str,
    *,
    ignore: tuple[type[Exception], ...] = (),
) -> T: ...
@overload
async def await_until(
    predicate: Callable[[], T],
    timeout_s: float,
    what: str,
    *,
    ignore: tuple[type[Exception], ...] = (),
) -> T: ...
async def await_until(
    predicate: Callable[[], object],
    timeout_s: float,
    what: str,
    *,
    ignore: tuple[type[Exception], ...] = (),
) -> object:
    """:func:`wait_until` within an event loop: the loop runs between two calls.

    ``predicate`` may be a plain function or a coroutine function.
    """
    deadline = time.monotonic() + timeout_s
    interval = _FIRST_INTERVAL_S
    while True:
        error: Exception | None = None
        value: object = None
        try:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
        except ignore as e:
            error = e
        if error is None and value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(_timed_out(what, timeout_s, value, error))
        await asyncio.sleep(interval)
        interval = min(interval * 2, _MAX_INTERVAL_S)
