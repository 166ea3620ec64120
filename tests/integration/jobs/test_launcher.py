"""`python -m tcl.jobs.launch` as a real subprocess: SIGTERM preemption, resume, outcomes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tcl.jobs import batchsize
from tcl.jobs.metrics import read_metrics

from .helpers import write_tiny

REPO = Path(__file__).resolve().parents[3]
SCOPE = Path("default/default/gpt-train/run-1")


def _launch(
    out: Path, config: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    argv = [
        sys.executable,
        "-m",
        "tcl.jobs.launch",
        "gpt/train",
        str(config),
        str(out),
        "--run-id",
        "run-1",
        *extra,
    ]
    return subprocess.Popen(
        argv,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _status(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "status" / SCOPE / "metadata.json").read_text())
    return data


def _wait_for(pred: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.1)


def test_sigterm_checkpoints_then_a_relaunch_resumes_and_finishes(tmp_path: Path) -> None:
    config = write_tiny(tmp_path)
    steps = [
        "training/total_steps=400",
        "logging/checkpoint_interval=0",
        "logging/report_interval=5",
    ]
    metrics = tmp_path / "logs" / SCOPE / "metrics.jsonl"
    proc = _launch(tmp_path, config, *steps, env={"TCL_HEARTBEAT_S": "0.3"})
    try:
        # Wait until it is training (a few steps reported), and has heartbeated.
        _wait_for(lambda: metrics.exists() and len(read_metrics(metrics)) >= 2, 120)
        first_beat = _status(tmp_path)["heartbeat_at"]
        _wait_for(lambda: _status(tmp_path)["heartbeat_at"] > first_beat, 10)
        assert _status(tmp_path)["status"] == "running"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, out
    status = _status(tmp_path)
    assert status["status"] == "preempted" and status["exit_code"] == 143
    saved = status["checkpoint"]
    saved_step = int(saved.removeprefix("step_"))
    assert 0 < saved_step < 400
    assert (tmp_path / "checkpoints" / SCOPE / "latest").read_text().strip() == saved

    again = _launch(tmp_path, config, *steps)
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out
    assert f"restoring from {SCOPE / saved}" in out
    status = _status(tmp_path)
    assert status["status"] == "completed" and status["exit_code"] == 0
    assert (tmp_path / "checkpoints" / SCOPE / "latest").read_text().strip() == "step_00000400"
    train = [r["step"] for r in read_metrics(metrics) if r["kind"] == "train"]
    resumed = train[train.index(max(s for s in train if s <= saved_step)) + 1 :]
    assert resumed[0] == (saved_step // 5 + 1) * 5 and resumed[-1] == 400


def test_fresh_starts_over_and_bad_config_names_the_key(tmp_path: Path) -> None:
    config = write_tiny(tmp_path)
    scope = tmp_path / "checkpoints" / SCOPE
    (scope / "step_00000099" / "checkpoint").mkdir(parents=True)  # junk from an old attempt
    done = _launch(
        tmp_path, config, "--fresh", "training/total_steps=3", "logging/checkpoint_interval=0"
    )
    out, _ = done.communicate(timeout=300)
    assert done.returncode == 0, out
    assert "restoring" not in out
    assert sorted(p.name for p in scope.iterdir()) == ["latest", "step_00000003"]

    bad = _launch(tmp_path, config, "training/lrr=0.1")
    out, _ = bad.communicate(timeout=120)
    assert bad.returncode == 2
    assert "training/lrr" in out and "training/lr" in out


@pytest.mark.timeout(300)
def test_auto_batch_size_probes_in_subprocesses_and_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Real probe subprocesses (no OOM is possible on CPU, so every candidate fits): the
    # search picks the largest candidate and the cache answers the second time.
    config = write_tiny(tmp_path)
    cache = tmp_path / "bs.json"
    monkeypatch.chdir(REPO)
    probe = batchsize.subprocess_probe("gpt/train", config, [], timeout_s=240)
    size, from_cache = batchsize.resolve("k", probe, "cpu", candidates=(2, 4), path=cache)
    assert (size, from_cache) == (4, False)
    assert not list(tmp_path.glob("checkpoints"))  # probes used their own temp roots
    assert batchsize.resolve("k", probe, "cpu", candidates=(2, 4), path=cache) == (4, True)


@pytest.mark.timeout(120)
def test_the_devices_are_read_in_a_child_so_the_searching_process_holds_none() -> None:
    # The launcher must not open the devices before its probes run (a JAX process takes 75 % of
    # each GPU; a TPU opens in one process at a time): the cache key's chip comes from a child.
    chip, devices = batchsize.describe_devices(timeout_s=100)
    assert chip == "cpu:cpu" and devices >= 1
