"""Sweeps on the local host (its embedded shim, process executor, fake GPUs): the real `tcl`
CLI, the real `tcl serve` scheduler it starts, real runs. Every outcome is read from what the
jobs themselves wrote (one line each, appended to a file), not only from tcl's tables."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tcl.control.errors import StoreError
from tests.integration.tclcli import (
    local_shim_client,
    run_tcl,
    stop_local_shim_and_tasks,
    stored_matrix_status,
    user_env,
)
from tests.polling import cpu_s, wait_until

USER_REPO = Path(__file__).resolve().parents[2] / "fixtures" / "userrepo"

# Appends "<job_id> <attempt> <start> <end> <ok|fail> <pid>" to $OUT/runs when done; fails with
# exit code 3 while its count (a file per job id) is below FAIL_UNTIL, with an error on stderr;
# sleeps SLEEP_S first (SLEEP_S < 0: until the test creates $OUT/release, at most 300 s).
JOB = """
import os, sys, time
start = time.time()
job_id, fail_until, sleep_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
counter = os.path.join(os.environ["OUT"], "count-" + job_id)
n = (int(open(counter).read()) if os.path.exists(counter) else 0) + 1
open(counter, "w").write(str(n))
release = os.path.join(os.environ["OUT"], "release")
while sleep_s < 0 and not os.path.exists(release) and time.time() < start + 300:
    time.sleep(0.05)
time.sleep(max(sleep_s, 0))
with open(os.path.join(os.environ["OUT"], "runs"), "a") as f:
    verdict = "fail" if n < fail_until else "ok"
    f.write(f"{job_id} {n} {start:.3f} {time.time():.3f} {verdict} {os.getpid()}\\n")
if n < fail_until:
    print(f"Traceback (most recent call last):\\nRuntimeError: oom ({n})", file=sys.stderr)
sys.exit(3 if n < fail_until else 0)
"""


class Sweep:
    def __init__(self, root: Path, gpus: int, **extra_env: str) -> None:
        self.extra_env = extra_env
        self.home, self.repo, self.out = root / "home", root / "repo", root / "out"
        for d in (self.home, self.repo, self.out):
            d.mkdir()
        self.config = root / "config.yaml"
        self.config.write_text(
            f'hosts:\n  here: {{type: local, fake_accelerators: "h100:{gpus}", '
            "executor: process}\n"
        )
        subprocess.run(["git", "init", "-q"], cwd=self.repo, check=True)
        (self.repo / "job.py").write_text(JOB)

    def env(self) -> dict[str, str]:
        return user_env(
            self.home, self.config, drop=("TCL_DB_URL",), COLUMNS="200", **self.extra_env
        )

    def tcl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return run_tcl(args, self.env(), self.repo, check=check, timeout=120)

    def add(self, name: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.tcl(
            "matrix",
            "add",
            "--name",
            name,
            "--chip",
            "h100",
            *args,
            "--env",
            f"OUT={self.out}",
            "--",
            "python",
            "job.py",
            "{job}",
            "{fail_until}",
            "{sleep_s}",
            check=check,
        )

    def status(self, name: str) -> dict[str, Any]:
        return dict(json.loads(self.tcl("matrix", "status", name, "--json").stdout))

    def wait(self, name: str, until: Callable[[dict[str, Any]], bool], timeout_s: float) -> None:
        """Until ``until`` holds for the matrix's status, read from the store in this process
        (a `tcl matrix status` per look would cost most of a core; the caller's assertions
        read the CLI's)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            began = cpu_s()
            with contextlib.suppress(StoreError):  # the daemon may be migrating it
                if until(stored_matrix_status(self.env(), name)):
                    return
            time.sleep(max(0.5, cpu_s() - began))  # tests/polling.py: never back to back
        pytest.fail(f"matrix {name} did not get there: {self.status(name)}\n{self.diagnosis(name)}")

    def diagnosis(self, name: str) -> str:
        """What a stalled sweep shows: its unfinished entries, their runs, the host's tasks, the
        daemon's logs (a test that times out says why)."""
        parts = []
        exported = self.tcl("matrix", "export", name, check=False).stdout or "{}"
        open_entries = {
            k: v
            for k, v in json.loads(exported).items()
            if v["state"] not in ("done", "failed", "cancelled")
        }
        parts.append(f"unfinished entries: {json.dumps(open_entries)[:4000]}")
        ps = self.tcl("ps", "-a", "--matrix", name, "--json", check=False).stdout or "[]"
        ended = ("succeeded", "failed", "terminated")
        runs = [r for r in json.loads(ps) if r["state"] not in ended]
        parts.append(f"their unfinished runs: {json.dumps(runs)[:6000]}")
        try:
            with self.local_shim() as shim:
                parts.append(f"host tasks: {shim.get('/tasks').text[:3000]}")
        except (httpx.HTTPError, OSError) as e:
            parts.append(f"host tasks: (the local shim did not answer: {e!r})")
        parts.append(f"serve.log:\n{self.serve_log(8000)}")
        fg = self.home / "serve-fg.log"
        if fg.exists():
            parts.append(f"serve-fg.log:\n{fg.read_text()[-3000:]}")
        return "\n".join(parts)

    def runs(self) -> list[list[str]]:
        path = self.out / "runs"
        return [line.split() for line in path.read_text().splitlines()] if path.exists() else []

    def serve_log(self, tail: int = 3000) -> str:
        log = self.home / "state" / "serve" / "serve.log"
        return log.read_text()[-tail:] if log.exists() else "(no serve log)"

    def local_shim(self) -> httpx.Client:
        """A client of the local shim (its Unix socket, its token)."""
        return local_shim_client(self.home / "state")

    def close(self) -> None:
        # cancel what is left (its runs stopped): nothing of a test goes on holding a GPU
        listed = self.tcl("matrix", "ls", "--json", check=False)
        for m in json.loads(listed.stdout or "[]"):
            self.tcl("matrix", "cancel", m["name"], check=False)
        self.tcl("serve", "--stop", check=False)
        stop_local_shim_and_tasks(self.home / "state" / "local-shim")


def _ended(st: dict[str, Any]) -> bool:
    c: dict[str, int] = st["counts"]
    return c["queued"] + c["claimed"] + c["running"] == 0


@pytest.fixture
def sweep(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Sweep]:
    """A local host with as many fake GPUs as the test's ``gpus`` mark says."""
    mark = request.node.get_closest_marker("gpus")
    s = Sweep(tmp_path, gpus=mark.args[0] if mark else 1)
    try:
        yield s
    finally:
        s.close()


def _manifest(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text(json.dumps(rows))
    return str(path)


@pytest.mark.gpus(2)
def test_a_failing_entry_is_retried_with_backoff_and_the_same_run(sweep: Sweep) -> None:
    s = sweep
    rows = [
        {"job_id": "flaky", "job": "flaky", "fail_until": 3, "sleep_s": 0},
        {"job_id": "hopeless", "job": "hopeless", "fail_until": 99, "sleep_s": 0},
        {"job_id": "fine", "job": "fine", "fail_until": 0, "sleep_s": 0},
    ]
    s.add(
        "retries",
        _manifest(s.out.parent / "m.json", rows),
        "--retry",
        "3",
        "--retry-on",
        "3",
        "--retry-backoff-s",
        "1",
    )
    s.wait("retries", _ended, 120)
    st = s.status("retries")
    assert st["counts"]["done"] == 2 and st["counts"]["failed"] == 1, st
    runs = s.runs()
    flaky = [r for r in runs if r[0] == "flaky"]
    assert [(r[1], r[4]) for r in flaky] == [("1", "fail"), ("2", "fail"), ("3", "ok")]
    # backoff: 1 s after the first failure, 2 s after the second (start to start, > backoff)
    starts = [float(r[2]) for r in flaky]
    assert starts[1] - float(flaky[0][3]) >= 1.0 and starts[2] - float(flaky[1][3]) >= 2.0
    assert [r[4] for r in runs if r[0] == "hopeless"] == ["fail", "fail", "fail"]
    assert [r[4] for r in runs if r[0] == "fine"] == ["ok"]
    export = json.loads(s.tcl("matrix", "export", "retries").stdout)
    assert export["flaky"]["attempts"] == 3 and export["flaky"]["state"] == "done"
    # where it ran (the seed's gpu): its latest attempt's GPU and task (issue 31)
    assert len(export["flaky"]["gpus"]) == 1 and export["flaky"]["nodes"][0].endswith("-2")
    assert export["hopeless"]["state"] == "failed"
    # the job's own last word beside its code (issue 31), in the export as in `tcl ps`
    last_error = export["hopeless"]["last_error"]
    assert last_error == "exit code 3: RuntimeError: oom (3); 3 attempts failed"
    # one run per entry, its attempts under the same run id (a tcl.jobs trainer resumes)
    ps = json.loads(s.tcl("ps", "-a", "--matrix", "retries", "--json").stdout)
    assert sorted(r["name"] for r in ps) == ["retries.fine", "retries.flaky", "retries.hopeless"]


def test_a_preempted_entry_runs_again_without_using_an_attempt(sweep: Sweep) -> None:
    s = sweep
    # it runs until the test releases it (not 4 s: a loaded machine ran it all between polls)
    rows = [{"job_id": "long", "job": "long", "fail_until": 0, "sleep_s": -1}]
    s.add("preempt", _manifest(s.out.parent / "m.json", rows))  # one attempt: no retries
    s.wait("preempt", lambda st: st["counts"]["running"] == 1, 60)
    shim = s.local_shim()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # its job has started once the counter file exists
        if (s.out / "count-long").exists():
            break
        time.sleep(0.2)
    notified = shim.post("/preemption", json={"message": "spot VM reclaimed", "grace_s": 1.0})
    assert notified.status_code == 200 and len(notified.json()) == 1, notified.text
    wait_until(lambda: (s.out / "count-long").read_text(), 90, "the second start", done="2".__eq__)
    (s.out / "release").touch()
    s.wait("preempt", _ended, 90)
    st = s.status("preempt")
    assert st["counts"]["done"] == 1, st
    # the first attempt was stopped before writing its line; the second one finished
    assert (s.out / "count-long").read_text() == "2"
    assert [(r[0], r[1], r[4]) for r in s.runs()] == [("long", "2", "ok")]


def test_higher_priority_entries_run_first_on_one_gpu(sweep: Sweep) -> None:
    s = sweep
    # the blocker holds the one GPU until both matrices are in (however slow this machine is)
    blocker = [{"job_id": "blocker", "job": "blocker", "fail_until": 0, "sleep_s": -1}]
    s.add("first", _manifest(s.out.parent / "b.json", blocker))
    s.wait("first", lambda st: st["counts"]["running"] == 1, 60)
    low = [{"job_id": f"low{i}", "job": f"low{i}", "fail_until": 0, "sleep_s": 0} for i in range(3)]
    high = [
        {"job_id": f"high{i}", "job": f"high{i}", "fail_until": 0, "sleep_s": 0} for i in range(3)
    ]
    s.add("low", _manifest(s.out.parent / "l.json", low), "--priority", "1")
    s.add("high", _manifest(s.out.parent / "h.json", high), "--priority", "5")
    (s.out / "release").touch()
    for name in ("first", "low", "high"):
        s.wait(name, _ended, 120)
    order = [r[0] for r in sorted(s.runs(), key=lambda r: float(r[2]))]
    # entries of one priority are placed at once (they race for the GPU): only the
    # priorities' order is promised, not the order within one
    assert order[0] == "blocker", order
    assert sorted(order[1:4]) == ["high0", "high1", "high2"], order
    assert sorted(order[4:]) == ["low0", "low1", "low2"], order


def test_bad_manifests_add_nothing_and_name_the_entries(sweep: Sweep) -> None:
    s = sweep
    dup = [
        {"job_id": "a", "job": "a", "fail_until": 0, "sleep_s": 0},
        {"job_id": "a", "job": "a", "fail_until": 0, "sleep_s": 0},
        {"job_id": "b", "job": "b", "fail_until": 0, "sleep_s": 0},
    ]
    res = s.tcl(
        "matrix",
        "add",
        _manifest(s.out.parent / "d.json", dup),
        "--name",
        "bad",
        "--",
        "python",
        "job.py",
        "{job}",
        check=False,
    )
    assert res.returncode == 2 and "more than once (nothing added): a\n" in res.stderr, res.stderr
    missing = [
        {"job_id": "x", "job": "x", "fail_until": 0},
        {"job_id": "y", "job": "y", "fail_until": 0, "sleep_s": 0},
    ]
    res = s.tcl(
        "matrix",
        "add",
        _manifest(s.out.parent / "m.json", missing),
        "--name",
        "bad",
        "--",
        "python",
        "job.py",
        "{job}",
        "{sleep_s}",
        check=False,
    )
    assert res.returncode == 2, res.stderr
    assert (
        "sleep_s" in res.stderr and "x" in res.stderr and "y" not in res.stderr.split("sleep_s")[-1]
    ), res.stderr
    assert len(res.stderr.strip().splitlines()) <= 3, res.stderr
    assert json.loads(s.tcl("matrix", "ls", "--json").stdout) == []


@pytest.mark.gpus(2)
def test_adding_again_is_idempotent_and_cancel_stops_running_entries(sweep: Sweep) -> None:
    s = sweep
    rows = [{"job_id": f"j{i}", "job": f"j{i}", "fail_until": 0, "sleep_s": 60} for i in range(4)]
    m = _manifest(s.out.parent / "m.json", rows)
    s.add("idem", m)
    reused = s.add("idem", m, check=False)  # a name in use: refused without --append
    assert reused.returncode != 0 and "--append to add to it" in reused.stderr, reused.stderr
    again = s.add("idem", m, "--append")
    assert "added 0 entries" in again.stderr and "4 already there" in again.stderr
    s.wait("idem", lambda st: st["counts"]["running"] == 2, 60)
    res = s.tcl("matrix", "cancel", "idem")
    assert "cancelled 4 entries" in res.stdout and "stopped 2 runs" in res.stdout, res.stdout
    st = s.status("idem")
    assert st["counts"]["cancelled"] == 4, st
    ps = json.loads(s.tcl("ps", "--matrix", "idem", "--json").stdout)
    assert ps == [], ps  # nothing left running
    s.tcl("matrix", "requeue", "idem", "--state", "cancelled", "--ids", "j0")
    assert s.status("idem")["counts"]["cancelled"] == 3
    # a chip no host has is refused at add, with what the hosts have (issue 31)
    grid = ["--grid", "i=1,2", "--", "python", "job.py", "{i}", "0", "0"]
    bad = s.tcl("matrix", "add", "--name", "a100s", "--chip", "a100", *grid, check=False)
    assert bad.returncode == 2, bad.stderr
    assert "no host here could ever run --chip a100" in bad.stderr and "here: h100" in bad.stderr
    assert "a100s" not in s.tcl("matrix", "status").stdout  # nothing was added


def test_submit_retry_places_a_single_run_again(sweep: Sweep) -> None:
    s = sweep
    res = s.tcl(
        "submit",
        "--chip",
        "h100",
        "--retry",
        "3",
        "--retry-backoff-s",
        "0.5",
        "--env",
        f"OUT={s.out}",
        "--",
        "python",
        "job.py",
        "single",
        "3",
        "0",
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert [(r[1], r[4]) for r in s.runs()] == [("1", "fail"), ("2", "fail"), ("3", "ok")]
    (run,) = json.loads(s.tcl("ps", "-a", "--json").stdout)
    assert run["state"] == "succeeded"
    # where each attempt ran: its host, its task there, the GPU it held, its job's pid; when
    # it started and ended (issue 31)
    for a, job in zip(run["attempts"], s.runs(), strict=True):
        [node] = a["nodes"]
        assert node["host"] == a["host"] == run["host"] and node["task"], a
        assert len(node["accelerators"]) == 1 and 0 <= node["accelerators"][0] < 8, a
        assert a["pid"] == int(job[5]), (a, job)
        assert a["placed_at"] <= a["started_at"] <= a["ended_at"], a
        assert 0 < a["duration_s"] < 60, a


def test_a_matrix_of_tcl_jobs_overrides_each_entrys_config(tmp_path: Path) -> None:
    """`--job KEY` with a grid over a config key: each entry's run is the job with that key
    set (as its saved config shows), checkpointed under MATRIX.JOB_ID."""
    home, work, out = tmp_path / "home", tmp_path / "work", tmp_path / "out"
    home.mkdir()
    shutil.copytree(USER_REPO, work, ignore=shutil.ignore_patterns("__pycache__"))
    env = user_env(home, drop=("TCL_CONFIG", "TCL_DB_URL"))

    def tcl(*args: str) -> subprocess.CompletedProcess[str]:
        return run_tcl(args, env, work, check=False, timeout=120)

    try:
        res = tcl(
            "matrix",
            "add",
            "--name",
            "jm",
            "--job",
            "custom/my_job_fixed",
            "--grid",
            "training.lr=0.5,0.25",
            "--env",
            f"TCL_OUT_DIR={out}",
        )
        assert res.returncode == 0, res.stderr
        deadline = time.monotonic() + 300
        while True:
            st = json.loads(tcl("matrix", "status", "jm", "--json").stdout)
            if st["counts"]["done"] + st["counts"]["failed"] == 2:
                break
            assert time.monotonic() < deadline, st
            time.sleep(1.0)
        assert st["counts"]["done"] == 2, st
        for lr in ("0.5", "0.25"):
            saved = list((out / "checkpoints").glob(f"*/*/jm.training.lr={lr}/*/step/9000"))
            assert len(saved) == 1, sorted((out / "checkpoints").rglob("latest"))
            config = (saved[0] / "config.yaml").read_text()
            assert f"lr: {lr}" in config, config
    finally:
        tcl("matrix", "cancel", "jm")
        tcl("serve", "--stop")
        stop_local_shim_and_tasks(home / "state" / "local-shim")


def test_a_sweep_run_has_one_owner_and_ps_and_logs_only_read_it(sweep: Sweep) -> None:
    from tcl.control.runleases import RunLeases
    from tcl.control.store import Store

    s = sweep
    rows = [{"job_id": "held", "job": "held", "fail_until": 0, "sleep_s": -1}]
    s.add("owned", _manifest(s.out.parent / "m.json", rows))
    s.wait("owned", lambda st: st["counts"]["running"] == 1, 60)
    [run] = json.loads(s.tcl("ps", "--matrix", "owned", "--json").stdout)
    controller = json.loads(s.tcl("serve", "--status").stdout)["controller"]
    store = Store(f"sqlite:///{s.home / 'state' / 'tcl.db'}")
    try:
        # placed, it is owned like any run, by the daemon's run controller (its scheduler
        # only reads how it goes): `tcl ps` and `tcl logs` read, they do not pull
        lease = RunLeases(store).of([run["run_id"]])[run["run_id"]]
        assert lease.owner == controller and lease.live(), lease
        for _ in range(3):
            assert s.tcl("ps").returncode == 0
            assert s.tcl("logs", run["run_id"]).returncode == 0
        (s.out / "release").touch()
        s.wait("owned", _ended, 60)
        assert s.status("owned")["counts"]["done"] == 1
        assert RunLeases(store).of([run["run_id"]]) == {}  # given up once it ended
    finally:
        store.close()
    kept = [json.loads(ln) for ln in (s.home / "state" / "logs" / f"{run['run_id']}.jsonl").open()]
    seqs = [(e.get("attempt", 0), e.get("node", 0), e["node_seq"]) for e in kept]
    assert len(seqs) == len(set(seqs)), seqs  # no event kept twice
