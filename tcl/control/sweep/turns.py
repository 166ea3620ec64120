"""Priority turns across a scheduler's batches.

A scheduler places each claimed batch in the background, one priority at a time, and claims
the next batch while earlier ones are still being placed. A lower-priority group of a later
batch must not race a higher-priority group of an earlier one for the last free GPU: it waits
until no higher group is being placed, and when one of those found nothing free meanwhile, it
goes back to the queue without trying (the cluster is full for the higher one, so it is for
this one too, and the higher one gets the next freed GPU).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Iterable


class PriorityTurns:
    def __init__(self) -> None:
        self._placing: Counter[int] = Counter()  # priority -> groups claimed and not yet done
        self._refused_above: dict[int, int | None] = {}  # ticket -> highest refused since
        self._tickets = itertools.count()
        self._changed = asyncio.Event()

    def claimed(self, priorities: Iterable[int]) -> int:
        """Register a batch just claimed (before anything else runs: a claim made after it
        sees its groups); its ticket."""
        for p in set(priorities):
            self._placing[p] += 1
        ticket = next(self._tickets)
        self._refused_above[ticket] = None
        return ticket

    async def turn(self, ticket: int, priority: int) -> bool:
        """Wait until no higher-priority group is being placed; False when one of them found
        nothing free since the batch was claimed (this group goes back to the queue)."""
        while any(p > priority and n for p, n in self._placing.items()):
            changed = self._changed
            await changed.wait()
        refused = self._refused_above.get(ticket)
        return refused is None or refused <= priority

    def done(self, priority: int, refused: bool) -> None:
        """A group of the batch is placed (or sent back: ``refused``)."""
        self._placing[priority] -= 1
        if self._placing[priority] <= 0:
            del self._placing[priority]
        if refused:
            for ticket, highest in self._refused_above.items():
                if highest is None or priority > highest:
                    self._refused_above[ticket] = priority
        self._changed.set()
        self._changed = asyncio.Event()

    def finished(self, ticket: int) -> None:
        """The batch is over (every group done, or it was cancelled)."""
        self._refused_above.pop(ticket, None)

    def busy(self) -> bool:
        return bool(self._placing)
