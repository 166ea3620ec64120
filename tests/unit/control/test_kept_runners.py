"""A backend's runner clients kept between pulls (``KeptRunners``): one per task, the first
kept wins, and a dropped one is closed once no call is in flight on it."""

from __future__ import annotations

from typing import Any

from tcl.control.backends.keptrunners import KeptRunners


class Client:
    def __init__(self) -> None:
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


async def test_the_first_kept_client_wins_and_a_dropped_one_closes_after_its_call() -> None:
    kept = KeptRunners()
    first, second = Client(), Client()
    a: Any = first
    b: Any = second
    assert kept.keep("t-0", a) is None
    assert kept.keep("t-0", b) is b  # another pull kept one meanwhile: the caller closes its own
    assert kept.get("t-0") is a
    async with kept.using("t-0") as using:
        assert using is a
        await kept.drop("t-0")  # its runner stopped answering, for another caller
        assert kept.get("t-0") is None and not first.closed  # this call goes on
    assert first.closed
    assert kept.keep("t-1", b) is None
    await kept.aclose()
    assert second.closed and kept.task_ids() == []
