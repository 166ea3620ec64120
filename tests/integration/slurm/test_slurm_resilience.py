"""SLURM runs through trouble: the login node's SSH connection cut mid-follow, a preempted
(requeued) `tcl.jobs` trainer that resumes from its checkpoint as attempt 1 of the same run, and
a job SLURM cancels for an `urgent` one (PreemptMode=CANCEL) resubmitted by tcl.

Same setup as test_e2e_slurm.py (the `slurm_cluster` testbed, the real `tcl` command), with a
host whose only partition is `preempt` (PreemptMode=REQUEUE).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tcl.control.backends.slurm.jobnames import job_name
from tcl.control.store import Attempt, Run, Store
from tests.integration.jobs.helpers import resumable_gpt_yaml
from tests.integration.slurm.test_e2e_slurm import Env, _config
from tests.integration.tclcli import TCL
from tests.polling import wait_until
from tests.testbed import SlurmCluster

pytestmark = [pytest.mark.integration, pytest.mark.slurm]


PY = sys.executable

N_LINES = 300
SLOW = f"""
import time
for i in range({N_LINES}):
    print(f"line {{i}}", flush=True)
    time.sleep(0.05)
"""

TOTAL_STEPS = 600  # ~15 s of steps on CPU: room to requeue it after the first checkpoint
GPT = resumable_gpt_yaml(TOTAL_STEPS)


@pytest.fixture(scope="module")
def env(slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("slurm-resilience")
    home, repo = root / "home", root / "repo"
    home.mkdir()
    repo.mkdir()
    (repo / "slow.py").write_text(SLOW)
    (repo / "gpt.yaml").write_text(GPT)
    work = slurm_cluster.base / "jobs" / f"work-{uuid.uuid4().hex[:8]}"
    config = root / "config.yaml"
    config.write_text(
        _config(slurm_cluster, work).replace(
            "{name: gpu, default: true}", "{name: preempt, default: true}"
        )
    )
    e = Env(home, config, repo, slurm_cluster)
    yield e
    runs = json.loads(e.tcl("ps", "-a", "--json", check=False).stdout or "[]")
    for r in runs:
        if r["state"] not in ("succeeded", "failed", "terminated"):
            e.tcl("stop", r["run_id"], check=False)


def _kill_login_connections(c: SlurmCluster) -> int:
    """Kill every per-connection child of the login node's sshd (this session's cluster only)."""
    listener = int((c.base / "login" / "sshd.pid").read_text().strip())
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(listener)], capture_output=True, text=True, check=False
    ).stdout.split()
    for pid in out:
        with contextlib.suppress(ProcessLookupError):  # it ended by itself
            os.kill(int(pid), signal.SIGKILL)
    return len(out)


def test_logs_follow_through_a_cut_login_connection(env: Env) -> None:
    run_id = env.tcl_json("submit", "-d", "--chip", "h100", "-n", "1", "--", PY, "slow.py")[
        "run_id"
    ]
    follow = subprocess.Popen(
        [TCL, "logs", "-f", run_id],
        cwd=env.repo,
        env=env.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert follow.stdout is not None
    seen: list[str] = []
    cut = 0
    try:
        for line in follow.stdout:
            seen.append(line.rstrip("\n"))
            if not cut and sum(s.endswith("line 60") for s in seen):
                cut = _kill_login_connections(env.cluster)
        err = follow.stderr.read() if follow.stderr else ""
        assert follow.wait(60) == 0, err
    finally:
        if follow.poll() is None:
            follow.kill()
    assert cut >= 1
    lines = [m.group(1) for s in seen if (m := re.search(r"(line \d+)$", s))]
    assert lines == [f"line {i}" for i in range(N_LINES)], (seen, err)  # none lost or repeated
    assert env.wait_state(run_id, {"succeeded"})["state"] == "succeeded"


# Counts to 40 in 0.25 s steps, keeping its count in a file (its "checkpoint"): an attempt
# resumes where the last one stopped.
COUNT = """
import os, pathlib, time
ckpt = pathlib.Path(os.environ["CKPT"])
start = int(ckpt.read_text()) if ckpt.exists() else 0
print(f"attempt {os.environ['TCL_ATTEMPT']} resumes at {start}", flush=True)
for i in range(start, 40):
    ckpt.write_text(str(i))
    time.sleep(0.25)
print("counted to 40", flush=True)
"""


def test_a_job_slurm_cancels_for_an_urgent_one_is_resubmitted_and_resumes(env: Env) -> None:
    """Issue 32: a `spot` partition (PreemptMode=CANCEL): SLURM cancels the job when an `urgent`
    job needs its node and does not requeue it. With --retry, tcl places it again as attempt 1
    of the same run (a preemption: no attempt counted), once the node is free again."""
    ckpt = env.cluster.base / "jobs" / f"ckpt-{uuid.uuid4().hex[:8]}"
    (env.repo / "count.py").write_text(COUNT)
    spot = env.config.with_name("spot.yaml")
    spot.write_text(env.config.read_text().replace("{name: preempt,", "{name: spot,"))
    tcl_env = {**env.env(), "TCL_CONFIG": str(spot)}
    argv = ["submit", "-d", "--json", "--retry", "2", "--chip", "h100", "-n", "4"]
    res = subprocess.run(
        [TCL, *argv, "--env", f"CKPT={ckpt}", "--", "python3", "count.py"],
        cwd=env.repo,
        env=tcl_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    run_id = json.loads(res.stdout)["run_id"]
    wait_until(
        lambda: int(ckpt.read_text()) if ckpt.exists() else 0,
        120,
        "its count",
        done=lambda n: n >= 5,
        ignore=(ValueError,),  # read while it is written
    )
    job_id = _job_id(env, run_id)
    # every GPU of both nodes, for 3 s: the spot job's node is taken back
    urgent = env.cluster.ssh("sbatch -p urgent -N 2 --gres=gpu:h100:4 --wrap 'sleep 3' --parsable")
    assert urgent.returncode == 0, urgent.stderr
    wait_until(lambda: _job_state(env, job_id), 60, "the cancel", done="PREEMPTED".__eq__)
    run, attempts, logs = _ended(env, run_id, tcl_env, 180)
    assert run.state.value == "succeeded", (run, logs[-3000:])
    assert [(a.attempt, a.cause.value if a.cause else None) for a in attempts] == [
        (0, "preempted"),
        (1, "exit"),
    ], attempts
    assert attempts[1].handle["job_id"] != job_id  # a new job: SLURM did not requeue it
    resumed = re.findall(r"attempt 1 resumes at (\d+)", logs)
    assert resumed and int(resumed[0]) >= 5 and "counted to 40" in logs, logs[-3000:]


def _ended(
    env: Env, run_id: str, tcl_env: dict[str, str], timeout_s: float
) -> tuple[Run, list[Attempt], str]:
    """The run once it ended (nobody follows it: the daemon's controller records it), its
    attempts and its logs."""
    store = Store(f"sqlite:///{env.home / 'state' / 'tcl.db'}")
    try:
        run = wait_until(
            lambda: store.get_run(run_id), timeout_s, "its end", done=lambda r: r.state.is_final
        )
        attempts = store.attempts(run_id)
    finally:
        store.close()
    logs = subprocess.run(
        [TCL, "logs", run_id], cwd=env.repo, env=tcl_env, capture_output=True, text=True
    ).stdout
    return run, attempts, logs


def _job_id(env: Env, run_id: str) -> str:
    # the job of its first attempt (a requeue keeps the job, and its name)
    out = env.cluster.ssh(f"squeue -h -t all -n {job_name(run_id, 0)} -o %i").stdout.split()
    assert len(out) == 1, out
    return out[0]


def _job_state(env: Env, job_id: str) -> str:
    return env.cluster.ssh(f"squeue -h -t all -j {job_id} -o %T").stdout.strip()


def _latest(out: Path) -> str | None:
    try:  # Orbax renames its temporary folders while the glob walks them
        found = sorted(out.glob("checkpoints/**/latest"))
        return found[0].read_text().strip() if found else None
    except FileNotFoundError:
        return None


def _steps(out: Path) -> list[int]:
    steps = []
    for f in out.glob("logs/**/metrics.jsonl"):
        steps += [json.loads(line)["step"] for line in f.read_text().splitlines() if line]
    return steps


def test_a_requeued_trainer_resumes_as_attempt_1_of_the_same_run(env: Env) -> None:
    out = env.cluster.base / "jobs" / f"out-{uuid.uuid4().hex[:8]}"
    res = env.tcl_json(
        "submit",
        "-d",
        "--chip",
        "h100",
        "-n",
        "1",
        "--job",
        "gpt/train",
        "--job-config",
        "gpt.yaml",
        "--env",
        f"TCL_OUT_DIR={out}",
    )
    run_id = res["run_id"]
    deadline = time.monotonic() + 180
    while _latest(out) is None:
        assert time.monotonic() < deadline, env.tcl("logs", run_id).stdout
        time.sleep(0.2)
    job_id = _job_id(env, run_id)
    req = env.cluster.ssh(f"scontrol requeue {job_id}")
    assert req.returncode == 0, req.stderr
    # requeued jobs wait ~120 s (BeginTime): once SLURM has it PENDING again, release it (the
    # update is repeated until the job leaves PENDING: one sent while it completes is lost)
    deadline = time.monotonic() + 90
    pending = False
    while True:
        state = _job_state(env, job_id)
        if pending and state != "PENDING":
            break
        assert time.monotonic() < deadline, state
        if state == "PENDING":
            pending = True
            env.cluster.ssh(f"scontrol update jobid={job_id} StartTime=now")
        time.sleep(0.5)
    # nobody follows it: the daemon's controller records the requeue and the run's end
    store = Store(f"sqlite:///{env.home / 'state' / 'tcl.db'}")
    try:
        wait_until(lambda: store.get_run(run_id), 300, "its end", done=lambda r: r.state.is_final)
        latest = store.latest_attempt(run_id)
    finally:
        store.close()
    logs = env.tcl("logs", run_id).stdout
    assert _job_id(env, run_id) == job_id
    runs = {r["run_id"]: r for r in env.tcl_json("ps", "-a")}
    assert runs[run_id]["state"] == "succeeded", (runs[run_id], logs[-3000:])
    assert latest is not None and latest.attempt == 1, latest
    assert latest.handle["restart"] == 1 and latest.handle["job_id"] == job_id, latest.handle

    restored = re.findall(r"tcl\.jobs: restoring from \S+/step_(\d+)", logs)
    assert len(restored) == 1, logs[-3000:]  # attempt 0 started fresh, attempt 1 resumed
    resumed_at = int(restored[0])
    assert 0 < resumed_at < TOTAL_STEPS
    steps = _steps(out)
    assert steps and max(steps) == TOTAL_STEPS, steps
    assert [s for s in steps if s > resumed_at] == sorted({s for s in steps if s > resumed_at})
    assert _latest(out) == f"step_{TOTAL_STEPS:08d}"


# Attempt 0 outlives its time limit; attempt 1 (the resubmit) ends at once.
OVERTIME = """
import os, time
attempt = os.environ["TCL_ATTEMPT"]
print(f"attempt {attempt} starts", flush=True)
if attempt == "0":
    time.sleep(600)
print(f"attempt {attempt} done", flush=True)
"""


@pytest.mark.timeout(420)
def test_a_job_at_its_time_limit_is_resubmitted_as_the_next_attempt(env: Env) -> None:
    """Issue 32: SLURM ends a job at its time limit (state TIMEOUT; a minute here, SLURM's
    smallest). That is the job's own failure: with --retry, tcl submits it again as attempt 1
    of the same run (a new SLURM job), which counts against the retries (`--retry 2`: two
    attempts may fail)."""
    (env.repo / "overtime.py").write_text(OVERTIME)
    limited = env.config.with_name("limited.yaml")
    limited.write_text(
        env.config.read_text().replace(
            "connect_timeout_s: 5",
            "connect_timeout_s: 5\n    time_limit_s: 60\n    signal_before_s: 0",
        )
    )
    tcl_env = {**env.env(), "TCL_CONFIG": str(limited)}
    argv = ["submit", "-d", "--json", "--retry", "2", "--retry-backoff-s", "0"]
    res = subprocess.run(
        [TCL, *argv, "--chip", "h100", "-n", "1", "--", "python3", "overtime.py"],
        cwd=env.repo,
        env=tcl_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    run_id = json.loads(res.stdout)["run_id"]
    job_id = wait_until(lambda: _job_id(env, run_id), 60, "its SLURM job", ignore=(Exception,))
    run, attempts, logs = _ended(env, run_id, tcl_env, 300)
    assert run.state.value == "succeeded", (run, logs[-3000:])
    assert [a.attempt for a in attempts] == [0, 1], attempts
    assert attempts[0].state.value == "failed", attempts[0]
    assert attempts[0].cause is not None and attempts[0].cause.value == "exit", attempts[0]
    assert attempts[1].handle["job_id"] != job_id  # a new SLURM job
    assert "attempt 0 starts" in logs and "attempt 1 done" in logs and "attempt 0 done" not in logs
