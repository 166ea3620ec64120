"""Wait for something to happen by polling it until a deadline: the one way tests wait.

A fixed sleep ("sleep 0.5, then assert it is unmounted") is either too short on a loaded machine
(the test flakes) or too long on an idle one (the suite crawls). These return as soon as the
condition holds, so their timeouts can be generous (30-60 s): they are only reached when the
thing never happens, and then the AssertionError names what was awaited and the last value seen.

    pid = wait_until(lambda: read_pid(path), 30, "the task's pid file")
    await await_until(lambda: mounted_fstype(mp, table) is None, 30, "the idle unmount")
    info = await await_until(lambda: client.get_task("t1"), 30, "t1 running",
                             done=lambda info: info.status is TaskStatus.RUNNING)
"""

from __future__ import annotations

import asyncio
import inspect
import resource
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

_FIRST_INTERVAL_S = 0.01
_MAX_INTERVAL_S = 0.2


class _Deadline:
    """The deadline of one wait, and the growing pause between two looks."""

    def __init__(self, timeout_s: float, what: str) -> None:
        self.timeout_s = timeout_s
        self.what = what
        self.end = time.monotonic() + timeout_s
        self.pause_s = _FIRST_INTERVAL_S

    def pause(self, seen: str, spent_s: float = 0.0) -> float:
        """The next pause, never shorter than the CPU time the look cost (``spent_s``,
        :func:`cpu_s`): a look that runs the `tcl` CLI costs most of a core for most of a
        second, and back-to-back looks would take that core from every other test (the suite
        is CPU-bound on 2 cores). AssertionError naming what was awaited once the deadline
        passed."""
        if time.monotonic() >= self.end:
            raise AssertionError(f"waited {self.timeout_s:g} s for {self.what}: {seen}")
        pause, self.pause_s = self.pause_s, min(self.pause_s * 2, _MAX_INTERVAL_S)
        return max(pause, spent_s)


def cpu_s() -> float:
    """CPU seconds of this process and of the children it waited for (a `tcl` command run to
    its end), so far."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def wait_until(
    predicate: Callable[[], T],
    timeout_s: float,
    what: str,
    *,
    done: Callable[[T], object] = bool,
    ignore: tuple[type[Exception], ...] = (),
) -> T:
    """Call ``predicate`` until ``done`` holds for what it returned (by default: until that is
    truthy), and return it.

    Exceptions of the types in ``ignore`` count as "not yet" (a server not listening yet); any
    other propagates. Past ``timeout_s``: AssertionError naming ``what`` and the last value (or
    exception) seen.
    """
    deadline = _Deadline(timeout_s, what)
    while True:
        began = cpu_s()
        try:
            value = predicate()
        except ignore as e:
            seen = f"last raised {e!r}"
        else:
            if done(value):
                return value
            seen = f"last value {value!r}"
        time.sleep(deadline.pause(seen, cpu_s() - began))


@overload
async def await_until(
    predicate: Callable[[], Awaitable[T]],
    timeout_s: float,
    what: str,
    *,
    done: Callable[[T], object] = bool,
    ignore: tuple[type[Exception], ...] = (),
) -> T: ...
@overload
async def await_until(
    predicate: Callable[[], T],
    timeout_s: float,
    what: str,
    *,
    done: Callable[[T], object] = bool,
    ignore: tuple[type[Exception], ...] = (),
) -> T: ...
async def await_until(
    predicate: Callable[[], Any],
    timeout_s: float,
    what: str,
    *,
    done: Callable[[Any], object] = bool,
    ignore: tuple[type[Exception], ...] = (),
) -> Any:
    """:func:`wait_until` within an event loop, which runs between two looks.

    ``predicate`` may be a plain function or a coroutine function.
    """
    deadline = _Deadline(timeout_s, what)
    while True:
        began = cpu_s()
        try:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
        except ignore as e:
            seen = f"last raised {e!r}"
        else:
            if done(value):
                return value
            seen = f"last value {value!r}"
        await asyncio.sleep(deadline.pause(seen, cpu_s() - began))
