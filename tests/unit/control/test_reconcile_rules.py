"""Which runs a controller owns (pure rules of tcl/control/lifecycle/ownership.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tcl.control.lifecycle.ownership import ControllerSettings, ownable, run_config, sweep_run
from tcl.control.runrequest import RunRequest
from tcl.control.states import RunState
from tcl.control.store import Run


def _run(state: RunState, host: str | None = "gpu1", age_s: float = 0.0, **request: Any) -> Run:
    now = time.time()
    return Run(
        "r1",
        "",
        state,
        host,
        "ssh" if host else None,
        RunRequest.model_validate(request),
        None,
        None,
        "",
        now,
        now - age_s,
    )


@pytest.mark.parametrize(
    ("state", "host", "owned"),
    [
        (RunState.QUEUED, "gpu1", True),  # in a scheduler's queue
        (RunState.WAITING_RETRY, "gpu1", True),  # its owner places it again when due
        (RunState.PROVISIONING, "gpu1", True),
        (RunState.RUNNING, "gpu1", True),
        (RunState.RUNNING, None, False),  # never placed: nothing to ask
        (RunState.SUCCEEDED, "gpu1", False),
        (RunState.FAILED, "gpu1", False),
        (RunState.TERMINATED, "gpu1", False),
    ],
)
def test_placed_live_runs_are_owned(state: RunState, host: str | None, owned: bool) -> None:
    assert ownable(_run(state, host)) is owned


def test_a_pending_run_is_its_submit_s_until_a_lease_would_have_lapsed() -> None:
    assert not ownable(_run(RunState.PENDING, None, age_s=5), lease_s=30)
    assert ownable(_run(RunState.PENDING, None, age_s=31), lease_s=30)


SWEEP = {"TCL_MATRIX": "m", "TCL_MATRIX_JOB_ID": "j"}


@pytest.mark.parametrize(
    ("state", "owned"),
    [
        (RunState.PROVISIONING, True),  # placed: owned like any run
        (RunState.RUNNING, True),
        (RunState.QUEUED, True),  # in its host's queue (a SLURM job pending, requeued)
        (RunState.PENDING, False),  # its scheduler places it
        (RunState.WAITING_RETRY, False),  # its entry is back in the queue: placed from there
        (RunState.SUCCEEDED, False),
    ],
)
def test_a_sweep_s_run_is_owned_once_placed(state: RunState, owned: bool) -> None:
    entry = _run(state, age_s=3600, env=SWEEP)
    assert sweep_run(entry) and ownable(entry) is owned
    assert not sweep_run(_run(RunState.RUNNING, env={"OTHER": "x"}))


def test_a_run_is_advanced_with_the_config_it_was_submitted_with(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    run = _run(RunState.RUNNING, config_path="/home/u/team.yaml", config_named=True)
    assert run_config(run) == ("/home/u/team.yaml", True)
    monkeypatch.setenv("TCL_CONFIG", str(tmp_path / "mine.yaml"))
    path, _ = run_config(_run(RunState.RUNNING))  # recorded before it was kept: the default
    assert path == str(tmp_path / "mine.yaml")


def test_the_heartbeat_follows_a_short_lease(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TCL_SERVE_LEASE_S", "3")
    s = ControllerSettings()
    assert s.lease_s == 3 and 0 < s.heartbeat_s < s.lease_s
    monkeypatch.delenv("TCL_SERVE_LEASE_S")
    assert ControllerSettings().lease_s == 30 and ControllerSettings().heartbeat_s == 5
