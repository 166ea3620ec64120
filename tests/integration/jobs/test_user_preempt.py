"""Seed 001's custom restorable job from the user's repo, run by the real launcher, preempted with
SIGTERM and relaunched with the same run id, twice in a row.

`custom/my_job` is the seed's example as written: its `run()` saves the restored step again
(into the suffix `latest` points to), which must be safe, and it applies that step twice after
each restore (the example's own off-by-one: the count shows it). `custom/my_job_fixed` resumes
at the next step and ends exactly where a straight run would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax.numpy as jnp
import pytest

from tcl.jobs import checkpoint as ckpt

RUN_ID = "r1"


def _launch(repo: Path, out: Path, key: str) -> subprocess.Popen[str]:
    env = {**os.environ, "MYJOBS_STEP_SLEEP_S": "0.0005", "PYTHONDONTWRITEBYTECODE": "1"}
    argv = [sys.executable, "-m", "tcl.jobs.launch", key, "-", str(out), "--run-id", RUN_ID]
    return subprocess.Popen(
        argv, cwd=repo, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )


def _latest_step(scope: Path) -> int | None:
    try:
        suffix = (scope / "latest").read_text().strip()
    except FileNotFoundError:
        return None
    return int(suffix.split("/")[1]) if suffix else None


def _preempt_when(proc: subprocess.Popen[str], scope: Path, at_least: int) -> str:
    """SIGTERM the launcher once `latest` names a step ≥ `at_least`; its output."""
    deadline = time.monotonic() + 120
    while (_latest_step(scope) or -1) < at_least:
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "no checkpoint came"
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, output  # preempted, not failed
    return output


def _status(out: Path, key: str) -> str:
    path = out / "status" / "default" / "default" / key.replace("/", "-") / RUN_ID
    status: str = json.loads((path / "metadata.json").read_text())["status"]
    return status


@pytest.mark.parametrize(
    ("key", "repeats_per_restore"), [("custom/my_job", 1), ("custom/my_job_fixed", 0)]
)
def test_preempted_twice_and_relaunched_with_the_same_run_id(
    user_repo: Path, tmp_path: Path, key: str, repeats_per_restore: int
) -> None:
    out = tmp_path / "out"
    scope = out / "checkpoints" / "default" / "default" / key.replace("/", "-") / RUN_ID

    _preempt_when(_launch(user_repo, out, key), scope, 2000)
    assert _status(out, key) == "preempted"
    first = _latest_step(scope)
    assert first is not None

    output = _preempt_when(_launch(user_repo, out, key), scope, first + 2000)
    assert f"restoring from default/default/{key.replace('/', '-')}/{RUN_ID}/step/{first}" in (
        output
    )
    second = _latest_step(scope)
    assert second is not None and second > first

    last = _launch(user_repo, out, key)
    output, _ = last.communicate(timeout=300)
    assert last.returncode == 0, output
    assert f"/{RUN_ID}/step/{second}" in output
    assert _status(out, key) == "completed"

    # The spec's loop saves every 1000 steps; its last checkpoint is step 9000, holding the
    # state after steps 0..9000 (9001 applications) plus any step applied twice on a restore.
    assert _latest_step(scope) == 9000
    directory = scope / "step" / "9000"
    template = {"w": jnp.zeros((4,), jnp.float32), "applied": jnp.zeros((), jnp.int32)}
    tree, metadata, _key = ckpt.load(directory, template)
    assert metadata == {"step": 9000}
    applied = 9001 + 2 * repeats_per_restore
    assert int(tree["applied"]) == applied
    assert tree["w"].tolist() == [float(applied)] * 4
    leftovers = [p.name for p in (scope / "step").iterdir() if p.name.startswith(".")]
    assert leftovers == []  # no half-swapped or partial checkpoint left behind
