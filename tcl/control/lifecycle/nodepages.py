"""What each node of an attempt says in a pull: its page of events (a long-poll of every live
node at once), its state, the first one that failed, whether one was hung, the job's pid."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tcl.control.backends.base import RUNNER_STATES, Backend, Handle, NodePage
from tcl.control.logcache import KeptEvent, LogCache
from tcl.control.states import RunState
from tcl.runner.api import EventKind, RunnerState

if TYPE_CHECKING:
    from tcl.control.store import Attempt

# A long-poll answered by one node: how long the others may still answer before their polls
# are cancelled (their events come with the next pull).
SIBLING_GRACE_S = 0.05


async def node_pages(
    backend: Backend, handle: Handle, att: Attempt, cache: LogCache, wait_s: float
) -> dict[int, NodePage]:
    """One page from each node that answers: the first answer ends every node's long-poll.

    A node whose final state is kept has nothing more to say and answers at once: polled beside
    live nodes it would win every race and cut their long-polls short, so their events would
    starve. Such a node is asked again only once every node is settled, and then all are asked
    at once and all answers are awaited (each comes at once): the backend's own final word."""
    nodes = range(handle.node_count)
    live = [n for n in nodes if cache.node_final(att.attempt, n) is None]
    polls = {
        asyncio.ensure_future(backend.events(handle, n, cache.node_last(att.attempt, n), wait_s)): n
        for n in (live or nodes)
    }
    try:
        if not live:
            done, _ = await asyncio.wait(polls)
        else:
            done, pending = await asyncio.wait(polls, return_when=asyncio.FIRST_COMPLETED)
            if pending and len(polls) > 1:
                more_done, pending = await asyncio.wait(pending, timeout=SIBLING_GRACE_S)
                done |= more_done
    finally:
        for t in polls:
            if not t.done():
                t.cancel()
        await asyncio.gather(*polls, return_exceptions=True)
    for t in done:
        t.result()  # the first failure propagates
    return {polls[t]: t.result() for t in done}


def first_failed(finals: list[KeptEvent | None]) -> tuple[int, KeptEvent] | None:
    """The first node whose job failed, and its kept final state, if any."""
    return next(
        ((n, f) for n, f in enumerate(finals) if f is not None and f.state is RunnerState.FAILED),
        None,
    )


def hung(pages: Iterable[NodePage]) -> bool:
    """Whether a node's runner ended its job as hung (its final state event says so)."""
    return any(e.kind is EventKind.STATE and e.reason == "hung" for p in pages for e in p.events)


def job_pid(page: NodePage | None) -> int | None:
    """The job's pid on the first node, when this page holds its ``running`` event."""
    for e in page.events if page is not None else ():
        if e.kind is EventKind.STATE and e.state is RunnerState.RUNNING and e.pid is not None:
            return e.pid
    return None


def node_state(pages: dict[int, NodePage], cache: LogCache, att: Attempt, node: int) -> RunState:
    """A node's state as this pull knows it: its page's; else its kept final state; else (its
    poll was cut short) still live."""
    if node in pages:
        return pages[node].state
    final = cache.node_final(att.attempt, node)
    if final is not None and final.state is not None:
        return RUNNER_STATES[final.state]
    return RunState.RUNNING


def failed_node(
    pages: dict[int, NodePage], states: list[RunState]
) -> tuple[int, int | None] | None:
    """The first node whose job failed while another node is still live, if any."""
    if len(states) < 2 or all(s.is_final for s in states):
        return None
    for n in sorted(pages):
        if pages[n].state is RunState.FAILED:
            return n, pages[n].exit_code
    return None
