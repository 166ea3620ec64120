"""A sweep whose `tcl serve` is SIGKILLed again and again (the local host, 8 fake GPUs, 30 % of
the entries failing at first under ``--retry 3``): every entry ends done or failed after exactly
its budget of starts, none fails for the kills, none is left stuck, and every GPU is free at the
end. Each kill leaves the dead daemon's entries and runs leased; the next daemon takes them once
their leases lapse (3 s here) and follows the runs that went on meanwhile.

``TCL_TEST_KILL_ENTRIES`` (default 64: eight waves on 8 GPUs) sets the size: the issue's scale
is 300.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.control.test_sweep_local import Sweep, _ended, _manifest
from tests.integration.tclcli import run_tcl, start_tcl, stop_tcl
from tests.polling import wait_until

ENTRIES = int(os.environ.get("TCL_TEST_KILL_ENTRIES", "64"))
KILLS = 5
RETRIES = 3


@pytest.fixture
def sweep(tmp_path: Path) -> Iterator[Sweep]:
    s = Sweep(tmp_path, gpus=8, TCL_SERVE_LEASE_S="3")
    try:
        yield s
    finally:
        s.close()


def _daemon_pid(s: Sweep) -> int | None:
    sock = s.home / "state" / "serve" / "daemon.sock"
    try:
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), timeout=10) as c:
            return int(c.get("http://localhost/api/healthcheck").json()["pid"])
    except (httpx.HTTPError, OSError):
        return None


def _starts(fail_until: int) -> int:
    """How often an entry's job starts under ``--retry 3``: until it succeeds (it fails while
    its count is below ``fail_until``), 3 times at most."""
    return min(max(fail_until, 1), RETRIES)


def test_a_sweep_survives_its_daemon_killed_five_times(sweep: Sweep) -> None:
    """With ``--retry 3`` and 30 % of the entries failing at first (some for good): each entry
    ends done or failed after exactly its budget, whatever the kills cut short."""
    s = sweep
    rng = random.Random(28)
    fails = {f"e{i:03d}": rng.choice([0] * 7 + [2, 3, 9]) for i in range(ENTRIES)}
    rows = [
        {"job_id": j, "job": j, "fail_until": n, "sleep_s": rng.uniform(1, 3)}
        for j, n in fails.items()
    ]
    retry = ("--retry", str(RETRIES), "--retry-on", "3", "--retry-backoff-s", "1")
    s.add("kills", _manifest(s.out.parent / "m.json", rows), *retry)
    serve: subprocess.Popen[str] | None = None
    try:
        for _ in range(KILLS):
            time.sleep(rng.uniform(3, 8))  # a kill at a random moment of the sweep
            # (the daemon started last time may still be starting on a loaded machine)
            pid = wait_until(lambda: _daemon_pid(s), 60, "the daemon answering")
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            if serve is not None:
                serve.wait(10)
            with (s.home / "serve-fg.log").open("a") as log:  # read, or a full pipe blocks it
                serve = start_tcl(["serve"], s.env(), s.repo, stderr=log)
        # (within pytest's 600 s, so that a stall prints its diagnosis)
        s.wait("kills", _ended, 450)
        st = s.status("kills")
        done = {j for j, n in fails.items() if n <= RETRIES}
        expected = {"done": len(done), "failed": ENTRIES - len(done)}
        assert {k: st["counts"][k] for k in expected} == expected, (
            st["counts"],
            st.get("failures"),
        )
        # each job started exactly its budget's times: never twice for one attempt
        starts = {p.name.removeprefix("count-"): int(p.read_text()) for p in s.out.glob("count-*")}
        wrong = {
            j: (starts.get(j), _starts(n)) for j, n in fails.items() if starts.get(j) != _starts(n)
        }
        assert not wrong, wrong
        ran = Counter((r[0], r[1]) for r in s.runs())
        assert len(ran) == sum(starts.values()) and set(ran.values()) == {1}, ran.most_common(3)
        with s.local_shim() as shim:
            gpus = shim.get("/host").json()["accelerators"]
            held = {g["task_id"] for g in gpus} - {None}
            tasks = [t for t in shim.get("/tasks").json() if t["id"] in held]
        assert len(gpus) == 8 and not held, tasks
        runs = json.loads(s.tcl("ps", "-a", "--matrix", "kills", "--json").stdout)
        states = {r["name"].removeprefix("kills."): r["state"] for r in runs}
        assert states == {j: "succeeded" if j in done else "failed" for j in fails}, states
        # each attempt ran to its exit; one before (a placement a kill cut short) was undone
        assert {r["attempts"][-1]["cause"] for r in runs} == {"exit"}
        before = Counter(a["cause"] for r in runs for a in r["attempts"][:-1])
        assert set(before) <= {"placement_failed", "exit"}, before
    finally:
        if serve is not None:
            stop_tcl(serve)


def test_a_placement_its_dead_scheduler_left_waits_for_room_then_runs(tmp_path: Path) -> None:
    """A scheduler died while placing an entry's run (an attempt that never reached its host).
    The next one undoes that attempt; with the one GPU busy the run waits to be placed (it is
    not followed as it stands, which would end it `terminated`) and runs once the GPU frees."""
    from tcl.control.errors import RunNotFoundError
    from tcl.control.lifecycle.submit import stored_request
    from tcl.control.states import AttemptCause, RunState
    from tcl.control.store import Store
    from tcl.control.sweep.model import EntryState
    from tcl.control.sweep.queue import SweepQueue
    from tcl.control.sweep.spec import MatrixSpec
    from tcl.control.sweep.submission import submission

    s = Sweep(tmp_path, gpus=1)
    serve: subprocess.Popen[str] | None = None
    store = None
    try:
        rows = [{"job_id": "e0", "job": "e0", "fail_until": 0, "sleep_s": 0}]
        s.add("left", _manifest(s.out.parent / "m.json", rows), "--no-start")
        # the one GPU is busy (a run with no daemon around) until $OUT/release exists
        blocker = ["submit", "-d", "--chip", "h100", "--env", f"OUT={s.out}", "--"]
        blocker += ["python", "job.py", "blocker", "0", "-1"]
        run_tcl(blocker, {**s.env(), "TCL_SERVE": "0"}, s.repo)
        # what its dead scheduler left: the run placed, its attempt recorded, nothing on a host
        store = Store(f"sqlite:///{s.home / 'state' / 'tcl.db'}")
        queue = SweepQueue(store)
        (entry,) = queue.entries("left")
        assert entry.run_id is not None
        spec = MatrixSpec.model_validate(queue.matrix("left").spec)
        sub = submission(spec, entry)
        run_id = entry.run_id
        store.create_run(run_id, sub.name, stored_request(sub, spec.job_cwd), spec.code_sha256)
        store.set_placement(run_id, "here", "local", spec.code_sha256)
        store.set_state(run_id, RunState.PROVISIONING)
        store.add_attempt(run_id, "here", "local")
        with (s.home / "serve-fg.log").open("a") as log:
            serve = start_tcl(["serve"], s.env(), s.repo, stderr=log)
        # adopted: the attempt undone, the run waiting to be placed (nothing free for it;
        # `queued` while the adopting scheduler places it again, then `waiting_retry`)
        wait_until(
            lambda: store.get_run(run_id).state in (RunState.QUEUED, RunState.WAITING_RETRY),
            60,
            "the run adopted and waiting",
            ignore=(RunNotFoundError,),
        )
        wait_until(lambda: queue.entry(entry.id).claims >= 2, 60, "the entry claimed again")
        assert queue.entry(entry.id).state not in (EntryState.FAILED, EntryState.DONE)
        (s.out / "release").touch()
        s.wait("left", _ended, 120)
        st = s.status("left")
        assert st["counts"]["done"] == 1, (st["counts"], st.get("failures"), s.serve_log())
        assert [(a.state, a.cause) for a in store.attempts(run_id)] == [
            (RunState.TERMINATED, AttemptCause.PLACEMENT_FAILED),
            (RunState.SUCCEEDED, AttemptCause.EXIT),
        ]
    finally:
        if store is not None:
            store.close()
        (s.out / "release").touch()
        if serve is not None:
            stop_tcl(serve)
        s.close()
