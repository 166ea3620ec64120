"""The run controller in `tcl serve` owns every placed run, followed or not (real processes, the
local default). These tests read the state store directly, never through a tcl command that
could advance a run itself: whatever moves the runs here is the daemon's controller."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tcl.control.daemon.client import stop_daemon
from tcl.control.errors import StoreError
from tcl.control.localshim import stop_local_shim
from tcl.control.states import AttemptCause, RunState
from tcl.control.store import Run, Store
from tests.integration.tclcli import (
    local_shim_client,
    run_tcl,
    start_tcl,
    stop_local_shim_and_tasks,
    stop_tcl,
    user_env,
)
from tests.polling import wait_until


class Home:
    """``gpus``: a config with one local host of that many fake GPUs (else the local default)."""

    def __init__(self, root: Path, gpus: int = 0, **extra: str) -> None:
        self.root = root
        self.work = root / "work"
        self.work.mkdir()
        config = None
        if gpus:
            config = root / "config.yaml"
            config.write_text(
                f'hosts:\n  here: {{type: local, fake_accelerators: "h100:{gpus}", '
                "executor: process}\n"
            )
        self.env = user_env(root, config, drop=("TCL_CONFIG", "TCL_DB_URL"), **extra)
        self._store: Store | None = None

    def tcl(self, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return run_tcl(args, self.env, self.work, check=False, timeout=timeout_s)

    def submit_detached(self, *args: str) -> str:
        res = self.tcl("submit", "-d", "--json", *args)
        assert res.returncode == 0, res.stderr
        return str(json.loads(res.stdout)["run_id"])

    @property
    def store(self) -> Store:
        if self._store is None:
            self._store = Store(f"sqlite:///{self.root / 'state' / 'tcl.db'}")
        return self._store

    def run(self, run_id: str) -> Run:
        return self.store.get_run(run_id)

    def attempts(self, run_id: str) -> int:
        return len(self.store.attempts(run_id))

    def shim(self) -> httpx.Client:
        return local_shim_client(self.root / "state")

    def daemon_pid(self) -> int:
        sock = self.root / "state" / "serve" / "daemon.sock"
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), timeout=10) as c:
            return int(c.get("http://localhost/api/healthcheck").json()["pid"])

    def close(self) -> None:
        stop_daemon(self.root / "state" / "serve")
        stop_local_shim_and_tasks(self.root / "state" / "local-shim")
        if self._store is not None:
            self._store.close()


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    h = Home(tmp_path, TCL_SERVE_LEASE_S="3")
    yield h
    h.close()


@pytest.fixture
def gpu_home(tmp_path: Path) -> Iterator[Home]:
    h = Home(tmp_path, gpus=8, TCL_SERVE_LEASE_S="3", TCL_SERVE_ORPHANS_EVERY_S="1")
    yield h
    h.close()


def _lines(n: int, every_s: float = 0.0) -> str:
    pause = f"; time.sleep({every_s})" if every_s else ""
    return f"import time\nfor i in range({n}):\n    print(f'line {{i}}', flush=True){pause}\n"


# The scale is 1,000,000 lines (TCL_TEST_DETACHED_LINES=1000000: about 9 MB of events
# through the local shim; see the note of issue 28 for its time); CI runs 3,000.
DETACHED_LINES = int(os.environ.get("TCL_TEST_DETACHED_LINES", "3000"))


def test_a_detached_run_nobody_follows_keeps_every_line_after_its_host_is_gone(home: Home) -> None:
    n = DETACHED_LINES
    run_id = home.submit_detached("--", "python", "-c", _lines(n))
    # nobody follows and nothing here pulls: the daemon's controller ends the run
    run = wait_until(
        lambda: home.run(run_id), 120 + n / 2000, "the run's end", done=lambda r: r.state.is_final
    )
    assert run.state is RunState.SUCCEEDED, run
    # its host goes away (the task, its runner and everything it kept are gone with it)
    stop_local_shim(home.root / "state" / "local-shim")
    logs = home.tcl("logs", run_id)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.splitlines() == [f"line {i}" for i in range(n)]


def test_a_detached_retry_run_preempted_with_nobody_following_is_placed_again(
    home: Home,
) -> None:
    flag = home.root / "release"
    job = (
        "import os, pathlib, time\n"
        f"print('attempt', os.environ.get('TCL_ATTEMPT'), flush=True)\n"
        f"while not pathlib.Path({str(flag)!r}).exists():\n    time.sleep(0.1)\n"
    )
    run_id = home.submit_detached("--retry", "3", "--", "python", "-c", job)
    wait_until(lambda: home.run(run_id).state, 60, "running", done=RunState.RUNNING.__eq__)
    with home.shim() as shim:
        told = shim.post("/preemption", json={"message": "spot VM reclaimed", "grace_s": 1.0})
    assert told.status_code == 200 and len(told.json()) == 1, told.text
    # nobody follows: the controller sees the preemption and places attempt 1 itself
    wait_until(lambda: home.attempts(run_id), 60, "attempt 1 placed", done=(2).__eq__)
    wait_until(lambda: home.run(run_id).state, 60, "running again", done=RunState.RUNNING.__eq__)
    flag.touch()
    run = wait_until(lambda: home.run(run_id), 60, "its end", done=lambda r: r.state.is_final)
    assert run.state is RunState.SUCCEEDED, run
    # the run's end and its attempt's are two writes (the run's first): a read may fall between
    wait_until(
        lambda: home.store.attempts(run_id)[-1].state,
        30,
        "attempt 1's end",
        done=lambda st: st.is_final,
    )
    assert [(a.state, a.cause) for a in home.store.attempts(run_id)] == [
        (RunState.TERMINATED, AttemptCause.PREEMPTED),
        (RunState.SUCCEEDED, AttemptCause.EXIT),
    ]
    logs = home.tcl("logs", run_id).stdout.splitlines()
    assert [ln for ln in logs if ln.startswith("attempt")] == ["attempt 0", "attempt 1"], logs
    (shown,) = json.loads(home.tcl("ps", "-a", "--json").stdout)
    causes = [(a["attempt"], a["cause"]) for a in shown["attempts"]]
    assert causes == [(0, "preempted"), (1, "exit")], shown


def _kill_daemon_mid_run(home: Home) -> str:
    run_id = home.submit_detached("--", "python", "-c", _lines(400, every_s=0.02))
    logs_file = home.root / "state" / "logs" / f"{run_id}.jsonl"
    wait_until(lambda: logs_file.exists() and logs_file.stat().st_size > 0, 60, "first lines")
    os.kill(home.daemon_pid(), signal.SIGKILL)
    return run_id


def test_the_next_daemon_carries_on_a_killed_daemon_s_runs(home: Home) -> None:
    run_id = _kill_daemon_mid_run(home)
    # the next daemon takes the dead one's lease once it lapses (3 s here) and carries on
    # where the log cache stops, with nobody following
    serve = start_tcl(["serve"], home.env, home.work)
    try:
        run = wait_until(lambda: home.run(run_id), 120, "its end", done=lambda r: r.state.is_final)
        assert run.state is RunState.SUCCEEDED, run
        logs = home.tcl("logs", run_id)
        assert logs.stdout.splitlines() == [f"line {i}" for i in range(400)], logs.stderr
        shown = home.tcl("serve", "--status")
        assert shown.returncode == 0, shown.stderr
        status = json.loads(shown.stdout)
        assert status["controller"] and status["runs_owned"] == 0, status
    finally:
        stop_tcl(serve)


def test_a_follow_without_a_daemon_carries_on_a_killed_daemon_s_run(home: Home) -> None:
    run_id = _kill_daemon_mid_run(home)
    # `tcl logs -f` runs the controller in-process for its run: it takes the lapsed lease
    follow = home.tcl("logs", "-f", run_id, timeout_s=180)
    assert follow.returncode == 0, follow.stderr
    assert follow.stdout.splitlines() == [f"line {i}" for i in range(400)]
    assert home.run(run_id).state is RunState.SUCCEEDED


def test_a_killed_local_shim_loses_no_line_of_its_live_runs(gpu_home: Home) -> None:
    home = gpu_home
    runs = [
        home.submit_detached("--chip", "h100", "--", "python", "-c", _lines(300, every_s=0.03))
        for _ in range(8)
    ]
    logs = [home.root / "state" / "logs" / f"{r}.jsonl" for r in runs]
    wait_until(lambda: all(f.exists() for f in logs), 60, "every run's first lines")
    shim_json = home.root / "state" / "local-shim" / "shim.json"
    os.kill(int(json.loads(shim_json.read_text())["pid"]), signal.SIGKILL)
    # the runners go on; the controller asks again until the shim is back (started anew on
    # its next use) and keeps every line; nothing here touches the runs
    for run_id in runs:
        run = wait_until(
            functools.partial(home.run, run_id),
            180,
            f"{run_id}'s end",
            done=lambda r: r.state.is_final,
        )
        assert run.state is RunState.SUCCEEDED, run
        shown = home.tcl("logs", run_id)
        assert shown.stdout.splitlines() == [f"line {i}" for i in range(300)], run_id
    with home.shim() as shim:
        gpus = shim.get("/host").json()["accelerators"]
    assert len(gpus) == 8 and all(g["task_id"] is None for g in gpus), gpus


def test_a_submit_killed_mid_placement_leaves_nothing_pending_nor_holding_a_gpu(
    gpu_home: Home,
) -> None:
    home = gpu_home
    # a code upload long enough to kill the submit in the middle of its placement
    (home.work / "weights.bin").write_bytes(os.urandom(48 * 1024 * 1024))
    env = {**home.env, "TCL_SERVE": "0"}  # the placement runs in the CLI process itself
    submit = subprocess.Popen(
        [str(Path(sys.executable).parent / "tcl"), "submit", "--chip", "h100", "--", "true"],
        env=env,
        cwd=home.work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def attempt_made() -> str | None:
            for run in home.store.list_runs():
                if home.store.attempts(run.id):
                    return run.id
            return None

        # (the state dir and its database appear once the submit starts)
        found = wait_until(attempt_made, 120, "the submit's attempt", ignore=(StoreError,))
        assert found is not None
        run_id = found
        assert home.run(run_id).state is RunState.PENDING  # still placing it
    finally:
        submit.kill()
        submit.wait()
    # the next controller adopts it once the dead submit's lease lapsed (3 s here): its job
    # never started, so its task is stopped and freed and the run ends saying why
    serve = start_tcl(["serve"], home.env, home.work)
    try:
        run = wait_until(lambda: home.run(run_id), 120, "its end", done=lambda r: r.state.is_final)
        assert run.state is RunState.FAILED, run
        assert "its tcl submit stopped before the job started" in run.message, run
        assert [a.state for a in home.store.attempts(run_id)] == [RunState.TERMINATED]
        with home.shim() as shim:
            gpus = shim.get("/host").json()["accelerators"]
        assert all(g["task_id"] is None for g in gpus), gpus
    finally:
        stop_tcl(serve)


def test_what_killed_placers_and_unreachable_undos_leave_holds_no_gpu(gpu_home: Home) -> None:
    """A placer writes its task's name before it asks the host for it. Killed right then, it
    leaves that name (``made: false``): the next controller asks the host. A task made there
    (its job never started) is stopped and freed; none made ends the attempt at once. So is one
    whose runner was stopped before its job ran, or that its placer ended `not_started` (an
    adopter, or an undo, killed before it recorded so): `terminated` there is no job that ran.
    Every way the run ends saying why. A task the host still holds for an attempt that was discarded
    (its undo could not reach the host) is ended by the daemon's orphan sweep. A task of a run
    this store does not know (another user of the host) is left alone."""
    from tcl.control.runrequest import RunRequest

    home = gpu_home
    warm = home.submit_detached("--chip", "h100", "--", "true")  # the shim up, its host known
    wait_until(lambda: home.run(warm), 120, "the warm-up run", done=lambda r: r.state.is_final)
    stop_daemon(home.root / "state" / "serve")
    request = RunRequest(argv=["true"], chip="h100", chips=1)
    made_tasks = ["made-1-0", "stopped-1-0", "undone-1-0", "gone-1-0", "stranger-0"]
    placed = ("made-1", "never-1", "stopped-1", "undone-1")
    for run_id in placed:  # placers killed while the host made their task
        home.store.create_run(run_id, "", request)
        att = home.store.add_attempt(run_id, "here", "local")
        node = {"host": "here", "task_id": f"{run_id}-{att.attempt}"}
        handle = {"kind": "local", "nodes": [node], "made": False}
        home.store.update_attempt(run_id, att.attempt, handle=handle)
    home.store.create_run("gone-1", "", request)  # an attempt discarded, its task left
    home.store.add_attempt("gone-1", "here", "local")
    home.store.discard_attempt("gone-1", 0)
    with home.shim() as shim:
        for task_id in made_tasks:
            spec = {"id": task_id, "executor": "process", "accelerators": 1}
            assert shim.post("/tasks", json=spec).status_code == 201
        _stop_runner_before_its_job(shim, "stopped-1-0")
        undone = {"reason": "not_started", "message": "submit did not finish"}
        assert shim.post("/tasks/undone-1-0/terminate", json=undone).status_code == 200
    serve = start_tcl(["serve"], home.env, home.work)
    try:
        for run_id in placed:
            run = wait_until(
                functools.partial(home.run, run_id),
                120,
                "its end",
                done=lambda r: r.state.is_final,
            )
            assert run.state is RunState.FAILED, run
            assert "its tcl submit stopped before the job started" in run.message, run
            (ended,) = home.store.attempts(run_id)
            assert (ended.state, ended.cause) == (
                RunState.TERMINATED,
                AttemptCause.PLACEMENT_FAILED,
            )
        with home.shim() as shim:
            tasks = wait_until(
                lambda: {t["id"] for t in shim.get("/tasks").json()},
                120,
                "the orphan and the unstarted task ended",
                done=lambda ids: not ids & {"made-1-0", "stopped-1-0", "undone-1-0", "gone-1-0"},
            )
            assert "stranger-0" in tasks
            held = [g["task_id"] for g in shim.get("/host").json()["accelerators"] if g["task_id"]]
            assert held == ["stranger-0"], held
    finally:
        stop_tcl(serve)


def _stop_runner_before_its_job(shim: httpx.Client, task_id: str) -> None:
    """What an adopter killed right after stopping a placement's task leaves: its runner
    ``terminated``, its job never started, the attempt still ``provisioning``."""
    task = wait_until(
        lambda: shim.get(f"/tasks/{task_id}").json(),
        60,
        "its runner's port",
        done=lambda t: t["status"] == "running" and t["ports"]["runner"],
    )
    auth = {"Authorization": f"Bearer {task['runner_token']}"}
    base = f"http://127.0.0.1:{task['ports']['runner']}/api"
    with httpx.Client(base_url=base, headers=auth, timeout=10, trust_env=False) as runner:
        wait_until(
            lambda: runner.get("/healthcheck").status_code,
            60,
            "its runner",
            done=lambda code: code == 200,
            ignore=(httpx.TransportError,),
        )
        assert runner.post("/stop", json={"grace_s": 1}).status_code == 200
        assert runner.get("/healthcheck").json()["state"] == "terminated"
