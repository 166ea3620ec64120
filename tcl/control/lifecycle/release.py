"""Releasing what a run holds on its host, once every event of it is kept locally.

A pull with ``release`` frees a run's host resources the moment its last event is kept; a
follower that pulls without it (:class:`~tcl.control.lifecycle.follow.ResumingPull`) calls
:func:`release` once it has handed every event over.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from tcl.control.errors import AgentUnreachableError, TclError
from tcl.control.service import Control
from tcl.control.states import RunState

if TYPE_CHECKING:
    from tcl.control.store import Attempt

RELEASE_TRIES = 2  # one more on a new connection: a reset by a concurrent call, not a dead host


async def release_attempt(ctl: Control, att: Attempt, state: RunState) -> None:
    """Once every event is kept locally: free what the attempt holds on its host."""
    handle = ctl.handle(att)
    if handle.released:
        return
    for attempt in range(RELEASE_TRIES):
        try:
            await ctl.backend_for(att).release(handle, state)
            break
        except AgentUnreachableError:
            # a connection dropped or reset by a concurrent call (a loaded host): ask again
            # on a new one, once. Left unreleased after that, a task whose job ended holds no
            # accelerator (its shim freed them when the job ended) and is removed after its
            # retention; the orphan sweep takes only those whose owner let go (its docstring)
            if attempt == RELEASE_TRIES - 1:
                return
            await asyncio.sleep(0.2 * (attempt + 1))
        except TclError:
            return  # the host is gone: nothing to free that can be reached
    released = handle.model_copy(update={"released": True})
    ctl.store.update_attempt(att.run_id, att.attempt, handle=released.model_dump(mode="json"))


async def release(ctl: Control, run_id: str) -> None:
    """Free a final run's host resources once every event is kept (what a pull with
    ``release`` does): the host frees its accelerators and files."""
    run = ctl.store.get_run(run_id)
    att = ctl.store.latest_attempt(run_id)
    if att is not None and att.handle and run.state.is_final:
        await release_attempt(ctl, att, run.state)
