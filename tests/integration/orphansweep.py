"""A run given up on while its host did not answer, and the orphan sweep of that host: what the
TPU and Volcano orphan tests share."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest


def sweep_given_up(
    home: Path, config: Path, run_id: str, kind: str, host: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, list[str]]:
    """Record the run ended and its only attempt ``terminated`` for cause ``infra`` (its owner
    gave up on the host: nobody releases what it holds), then sweep ``host`` for orphans as the
    daemon's loop does, with no age limit. The attempt and the tasks the sweep ended."""
    from tcl.control.config import load_config
    from tcl.control.lifecycle.orphans import sweep_host
    from tcl.control.service import Control
    from tcl.control.states import AttemptCause, RunState
    from tcl.control.store import Store

    monkeypatch.setenv("TCL_STATE_DIR", str(home / "state"))
    store = Store(f"sqlite:///{home / 'state' / 'tcl.db'}")
    try:
        store.set_state(run_id, RunState.TERMINATED, message="its host did not answer")
        (att,) = store.attempts(run_id)
        store.update_attempt(
            run_id, att.attempt, state=RunState.TERMINATED, cause=AttemptCause.INFRA
        )
        ctl = Control(load_config(config), store)

        async def sweep() -> list[str]:
            try:
                return await sweep_host(ctl, kind, host, 0.0)
            finally:
                await ctl.aclose()

        return att.attempt, asyncio.run(sweep())
    finally:
        store.close()
