"""Adopting a run whose placement was interrupted: its placer (a ``tcl submit``, a controller
placing a retry or a lost node again, a sweep's scheduler) died between recording the attempt
and recording the run started.

Such a run is ``pending`` (a first placement), ``queued`` (a lost node placed again) or
``waiting_retry`` (a retry placed) while its latest attempt is still
``provisioning``. Its task may exist on the host, and its job may even have
started: the host is asked. Started: the placement is recorded and the run is followed. Not
started (the host says so: its job is not started yet, or it ended ``terminated`` before it
ran: a placement undone, or an adopter killed between stopping the task and recording so): the
task is stopped and freed and the attempt ends ``terminated``, and the caller places the run
again (nothing is left holding accelerators). The host does not answer: nothing is decided (it
may have started), the adoption is tried again later.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from tcl.control.errors import AgentUnreachableError, TaskNotFoundError, TclError
from tcl.control.lifecycle.release import release_attempt
from tcl.control.service import Control
from tcl.control.states import AttemptCause, RunState

if TYPE_CHECKING:
    from tcl.control.store import Attempt, Run, Store

NOT_STARTED = frozenset({RunState.PENDING, RunState.PROVISIONING})
# what a run is while it is placed: a first placement, one again (a lost node), a retry's
_PLACED_FROM = frozenset({RunState.PENDING, RunState.QUEUED, RunState.WAITING_RETRY})


def interrupted(store: Store, run: Run) -> Attempt | None:
    """The latest attempt, when its placement never finished (else None): the run is still
    being placed while its attempt is, or the run says placed while its latest attempt never
    named what it made on a host (its placer died in between)."""
    if run.state not in _PLACED_FROM and run.state is not RunState.PROVISIONING:
        return None
    att = store.latest_attempt(run.id)
    if att is None or att.state is not RunState.PROVISIONING:
        return None
    if run.state is RunState.PROVISIONING and att.handle:
        return None  # placed and recorded: its job started
    return att


async def adopt_placement(ctl: Control, run: Run, att: Attempt | None) -> bool:
    """True when the attempt's job started (its placement is recorded now: follow the run);
    False when nothing of it runs any more (the caller places the run again). Raises
    :class:`AgentUnreachableError` when its host cannot tell."""
    if att is None or att.state.is_final:
        return False
    if not att.handle:  # nothing reached a host
        ctl.store.update_attempt(
            run.id, att.attempt, state=RunState.TERMINATED, cause=AttemptCause.PLACEMENT_FAILED
        )
        return False
    try:
        status = await ctl.backend_for(att).status(ctl.handle(att))
    except TaskNotFoundError:
        # its placer died before the host made the task (or after it was removed): nothing
        # of it runs
        ctl.store.update_attempt(
            run.id, att.attempt, state=RunState.TERMINATED, cause=AttemptCause.PLACEMENT_FAILED
        )
        return False
    except TclError as e:
        # not knowing is no licence to start it again (it may have run): later
        raise AgentUnreachableError(
            f"cannot tell whether run {run.id}'s job started: {str(e).splitlines()[0]}"
        ) from None
    if status.state not in NOT_STARTED and not status.never_started:
        if run.state in _PLACED_FROM:
            ctl.store.set_placement(run.id, att.host, att.backend, run.code_sha256)
            ctl.store.set_state(run.id, RunState.PROVISIONING)
        return True  # its job started: whoever follows the run records how it goes on
    with contextlib.suppress(TclError):
        await ctl.backend_for(att).stop(ctl.handle(att), grace_s=1.0)
    ctl.store.update_attempt(
        run.id, att.attempt, state=RunState.TERMINATED, cause=AttemptCause.PLACEMENT_FAILED
    )
    await release_attempt(ctl, att, RunState.TERMINATED)
    return False
