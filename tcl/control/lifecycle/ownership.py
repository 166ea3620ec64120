"""Which runs a run controller owns (:mod:`tcl.control.lifecycle.reconcile`), and its
settings: a placed live run, a ``pending`` one whose placer's lease would have lapsed, a sweep's
run once its scheduler placed it, an ended run whose last events are still on its host."""

from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass, field

from tcl.control.lifecycle.pull import drained
from tcl.control.logcache import kept_log
from tcl.control.paths import config_path
from tcl.control.service import Control
from tcl.control.states import RunState
from tcl.control.store import Run

OWNED_STATES = frozenset(
    {RunState.QUEUED, RunState.PROVISIONING, RunState.RUNNING, RunState.WAITING_RETRY}
)
# a sweep's run in these is its scheduler's to place (its entry is in the queue)
SWEEP_QUEUED = frozenset({RunState.PENDING, RunState.WAITING_RETRY})
# a run in these may answer a pull at once, with nothing new: its owner paces its pulls
WAITING_STATES = frozenset({RunState.QUEUED, RunState.PENDING, RunState.WAITING_RETRY})


def default_lease_s() -> float:
    """How long a silent owner keeps its runs: ``$TCL_SERVE_LEASE_S`` (30 s)."""
    return float(os.environ.get("TCL_SERVE_LEASE_S") or 30.0)


@dataclass(frozen=True)
class ControllerSettings:
    # a controller (or a submit placing a run) silent this long loses its runs to the next one
    lease_s: float = field(default_factory=default_lease_s)
    # how often it renews its leases: a third of the lease, at most 5 s
    heartbeat_s: float = field(default_factory=lambda: min(5.0, default_lease_s() / 3))
    pass_s: float = 2.0  # how often it looks for runs nobody owns
    # a sweep's run whose host does not answer this long ends for cause `infra` (its entry
    # fails, the next entries go on); other runs are asked again for as long as it takes
    sweep_unreachable_s: float = 300.0


def controller_id(kind: str = "serve") -> str:
    return f"{socket.gethostname()[:40]}-{kind}-{os.getpid()}-{secrets.token_hex(3)}"


def sweep_run(run: Run) -> bool:
    """A matrix entry's run: its sweep scheduler places it, a controller owns it once placed."""
    return "TCL_MATRIX" in run.request.env


def run_config(run: Run) -> tuple[str, bool]:
    """The config file its submit used (runs recorded before it was kept: the default one)."""
    if run.request.config_path:
        return run.request.config_path, run.request.config_named
    found, named = config_path()
    return str(found), named


def ownable(run: Run, lease_s: float = 30.0) -> bool:
    """A live run a controller advances: placed, or ``pending`` for longer than a placer's
    lease (its submit died mid-placement: adopted once that lease lapsed). A sweep's run only
    once placed (pending or waiting for a retry, it is its scheduler's to place)."""
    if sweep_run(run):
        return run.state in OWNED_STATES - SWEEP_QUEUED and run.host is not None
    if run.state is RunState.PENDING:
        return time.time() - run.updated_at > lease_s
    return run.state in OWNED_STATES and run.host is not None


def undrained(ctl: Control, run: Run) -> bool:
    """An ended run (stopped here, say) whose last events are still on its host."""
    if not run.state.is_final:
        return False
    att = ctl.store.latest_attempt(run.id)
    if att is None or not att.handle or ctl.handle(att).released:
        return False
    return not drained(ctl, kept_log(run.id), run.id)
