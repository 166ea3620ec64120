"""The gpt/train trainer across 2 processes, each a real ``tcl-runner batch`` given one shared
``job`` spec and srun's variables, writing into one shared out dir (JAX on CPU, gloo).

One node is preempted; both stop at the same step with one checkpoint, then a requeue of both
resumes from it and completes."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tcl.jobs.layout import LATEST_FILE, is_complete
from tcl.runner.api import JobRef, JobSpec
from tcl.runner.events import EventLog
from tests.integration.runner.test_batch import write_spec

RUNNER = [sys.executable, "-m", "tcl.runner.main", "batch"]
CONFIG = """\
job: gpt/train
architecture: {block_size: 32, n_layers: 2, d_model: 32, n_heads: 2}
training: {per_device_batch_size: 4, total_steps: %d, lr: 0.003, warmup_steps: 5}
logging: {report_interval: 5, validation_interval: 0, checkpoint_interval: %d}
data: {max_bytes: 100000}
"""
RUN = "default/default/gpt-train/mn"  # project/group/name/run id under out/<kind>/


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def start_two_nodes(
    tmp_path: Path, out: Path, total_steps: int, restart_count: int, checkpoint_interval: int = 0
) -> list[subprocess.Popen[bytes]]:
    spec = JobSpec(
        run_id="mn",
        job=JobRef(key="gpt/train", config_yaml=CONFIG % (total_steps, checkpoint_interval)),
        env={"TCL_OUT_DIR": str(out)},  # shared by the nodes, as a cluster's shared disk
    )
    spec_path = write_spec(tmp_path, spec)
    base = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    base.update(
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
        SLURM_NTASKS="2",
        SLURM_RESTART_COUNT=str(restart_count),
        TCL_COORDINATOR=f"127.0.0.1:{free_port()}",
    )
    return [
        subprocess.Popen(
            [
                *RUNNER,
                "--spec",
                str(spec_path),
                "--state-dir",
                str(tmp_path / f"r{restart_count}-{rank}"),
            ],
            env={**base, "SLURM_PROCID": str(rank)},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for rank in (0, 1)
    ]


def wait_all(procs: list[subprocess.Popen[bytes]], tmp_path: Path, attempt: int) -> list[str]:
    """The runners' exit and each job's output (from its event log)."""
    try:
        for proc in procs:
            proc.wait(timeout=150)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    outputs = []
    for rank in (0, 1):
        events, _ = EventLog(tmp_path / f"r{attempt}-{rank}" / "events").read(0, 100_000)
        outputs.append("".join(e.data or "" for e in events if e.kind == "log"))
    return outputs


def statuses(out: Path) -> dict[str, dict[str, object]]:
    status_dir = out / "status" / RUN
    return {p.name: json.loads(p.read_text()) for p in sorted(status_dir.glob("*.json"))}


def reported_steps(out: Path) -> list[int]:
    metrics = out / "logs" / RUN / "metrics.jsonl"
    if not metrics.exists():
        return []
    return [json.loads(line)["step"] for line in metrics.read_text().splitlines() if line]


@pytest.mark.slow  # two 2-process runs: ~30-40 s on 2 shared cores
def test_a_preempted_node_stops_both_at_one_checkpoint_and_a_requeue_resumes(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    procs = start_two_nodes(tmp_path, out, total_steps=400, restart_count=0)
    deadline = time.monotonic() + 120
    while not reported_steps(out) and time.monotonic() < deadline:
        assert all(p.poll() is None for p in procs), wait_all(procs, tmp_path, 0)
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGTERM)  # only node 1 is asked to stop
    logs = wait_all(procs, tmp_path, 0)

    first = statuses(out)
    assert set(first) == {"metadata.json", "metadata.node-1.json"}, logs
    assert {s["status"] for s in first.values()} == {"preempted"}, logs
    checkpoints = {s["checkpoint"] for s in first.values()}
    assert len(checkpoints) == 1, first  # the same step on both nodes
    suffix = checkpoints.pop()
    assert isinstance(suffix, str)
    stopped_at = int(suffix.removeprefix("step_"))
    assert 0 < stopped_at < 400
    scope = out / "checkpoints" / RUN
    assert (scope / LATEST_FILE).read_text().strip() == suffix
    assert is_complete(scope / suffix)

    # The scheduler requeues both tasks with the same spec (and a restart count): they resume.
    # The last step saves twice over: its interval's checkpoint, then (skipped on every node
    # alike: it is `latest` already) the one at the end.
    procs = start_two_nodes(
        tmp_path, out, total_steps=stopped_at + 5, restart_count=1, checkpoint_interval=5
    )
    logs = wait_all(procs, tmp_path, 1)
    assert [p.returncode for p in procs] == [0, 0], logs
    assert {s["status"] for s in statuses(out).values()} == {"completed"}, logs
    for rank, log in enumerate(logs):
        assert f"tcl.jobs: restoring from {RUN}/{suffix}" in log, (rank, log)
    final = f"step_{stopped_at + 5:08d}"
    assert (scope / LATEST_FILE).read_text().strip() == final
    assert is_complete(scope / final)
    steps = reported_steps(out)  # process 0 alone reports: each step once
    assert steps == sorted(set(steps)) and steps[-1] == stopped_at + 5, steps
