"""The login-node scripts (``tcl.control.backends.slurm.scripts``) against their real
counterparts: the runner's event log and ``status.json`` written by a real ``Runner`` (as
``tcl-runner batch`` writes them), and a ``squeue`` on PATH that prints the ``-O`` fields it is
asked for. Each runs as the backend sends it (``python -c TEXT ARGS``), with the standard
library only (``-I -S``: no site-packages, so no tcl)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tcl.control.backends.slurm import parse, remote
from tcl.control.backends.slurm.scripts import events as events_script
from tcl.control.backends.slurm.scripts import statuses as statuses_script
from tcl.runner import events as runner_events
from tcl.runner.api import Event, LogStream, RunnerState
from tcl.runner.batch import STATUS_FILE, StatusFile
from tcl.runner.service import Runner, RunnerConfig
from tests.polling import wait_until

SCRIPTS = Path(events_script.__file__).parent
WAIT_S = 60.0  # a wait the tests below never sit out: each answer must come long before

# A squeue that prints, for each job asked for (-j), its row from rows.json in the -O format
# asked for ("JobID:|,State:|,...": each field's value, then its suffix), and logs its argv.
FAKE_SQUEUE = """#!{python}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
argv = sys.argv[1:]
with open(os.path.join(here, "argv.log"), "a") as f:
    f.write(json.dumps(argv) + "\\n")
with open(os.path.join(here, "rows.json")) as f:
    rows = json.load(f)
specs = [s.partition(":") for s in argv[argv.index("-O") + 1].split(",")]
for job in argv[argv.index("-j") + 1].split(","):
    if job in rows:
        cols = [str(rows[job][name]) + suffix.lstrip("0123456789.") for name, _, suffix in specs]
        print("".join(cols))
"""


@dataclass
class Squeue:
    """The fake ``squeue`` on PATH: set its rows, read the argv it was called with."""

    bin_dir: Path

    def rows(self, rows: dict[str, dict[str, object]]) -> None:
        (self.bin_dir / "rows.json").write_text(json.dumps(rows))

    def row(self, job: str, state: str) -> None:
        fields = {"JobID": job, "State": state, "Reason": "None", "RestartCnt": 0}
        self.rows({job: {**fields, "NodeList": "node1"}})

    def calls(self) -> list[list[str]]:
        log = self.bin_dir / "argv.log"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "PATH": f"{self.bin_dir}{os.pathsep}{os.environ['PATH']}"}


@pytest.fixture
def squeue(tmp_path: Path) -> Squeue:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "squeue"
    exe.write_text(FAKE_SQUEUE.format(python=sys.executable))
    exe.chmod(0o755)
    fake = Squeue(bin_dir)
    fake.rows({})
    return fake


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Runner]:
    """A batch node's runner: its event log and a status.json kept equal to its state."""
    config = RunnerConfig(state_dir=tmp_path / "state")
    runner = Runner(config)
    status = StatusFile(config.state_dir / STATUS_FILE, "r1")
    runner.add_state_hook(status)
    status(runner.state, None)
    yield runner
    runner.close()


def argv(text: str, *args: str) -> list[str]:
    return [sys.executable, "-I", "-S", "-c", text, *args]


def events_args(node: Runner, after: int, limit: int, wait_s: float = WAIT_S) -> list[str]:
    state_dir = str(node.config.state_dir)
    return [state_dir, str(after), str(limit), f"{wait_s:.1f}", "42", parse.SQUEUE_FIELDS]


def answer(res: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert res.returncode == 0, res.stderr
    out: dict[str, Any] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def run_events(squeue: Squeue, node: Runner, after: int, limit: int) -> dict[str, Any]:
    res = subprocess.run(
        argv(remote.EVENTS_PY, *events_args(node, after, limit)),
        capture_output=True,
        text=True,
        env=squeue.env,
        timeout=WAIT_S + 30,
    )
    return answer(res)


def test_the_backend_sends_the_scripts_files() -> None:
    assert (SCRIPTS / "events.py").read_text() == remote.EVENTS_PY
    assert (SCRIPTS / "statuses.py").read_text() == remote.STATUSES_PY


def test_the_scripts_wire_constants_are_their_owners() -> None:
    assert events_script.EVENTS_FILE == runner_events.EVENTS_FILE
    assert events_script.INDEX_FILE == runner_events.INDEX_FILE
    assert events_script.INDEX_ENTRY.format == runner_events._ENTRY.format
    assert events_script.STATUS_FILE == statuses_script.STATUS_FILE == STATUS_FILE
    assert set(events_script.FINAL_STATES) == {s.value for s in RunnerState if s.is_final}
    # what the backend reads as queued or on its nodes is what the script waits on
    assert set(events_script.WAITING) == parse.PENDING | parse.LIVE


def test_the_event_dir_is_the_runners(node: Runner) -> None:
    assert node.log.directory == node.config.state_dir / events_script.EVENTS_DIR


def test_events_after_a_seq_up_to_the_limit(squeue: Squeue, node: Runner) -> None:
    for i in range(5):
        # seq 3..7 (1: waiting_spec, 2: the runner_ready phase)
        node.log.append_log(LogStream.STDOUT, f"line {i}\n")
    squeue.row("42", "RUNNING")
    got = run_events(squeue, node, after=3, limit=3)
    events = [Event.model_validate_json(line) for line in got["events"]]
    assert [(e.seq, e.data) for e in events] == [(4, "line 1\n"), (5, "line 2\n"), (6, "line 3\n")]
    assert got["last"] == 7 == node.log.last_seq
    assert got["status"]["state"] == RunnerState.WAITING_SPEC and got["status"]["run_id"] == "r1"
    row = parse.parse_squeue(got["squeue"])["42"]
    assert (row.state, row.restarts, row.nodes) == ("RUNNING", 0, "node1")
    assert squeue.calls()[-1] == ["-h", "-t", "all", "-j", "42", "-O", parse.SQUEUE_FIELDS]


def test_a_final_status_ends_the_wait_at_once(squeue: Squeue, node: Runner) -> None:
    node.stop(0)  # no job yet: terminated at once, status.json says so
    assert node.wait(30)
    squeue.row("42", "RUNNING")
    t0 = time.monotonic()
    got = run_events(squeue, node, after=node.log.last_seq, limit=100)
    assert time.monotonic() - t0 < WAIT_S / 2
    assert got["events"] == [] and got["last"] == node.log.last_seq
    assert got["status"]["state"] == RunnerState.TERMINATED


def test_a_job_slurm_no_longer_lists_answers_at_once(squeue: Squeue, node: Runner) -> None:
    t0 = time.monotonic()
    got = run_events(squeue, node, after=node.log.last_seq, limit=100)
    assert time.monotonic() - t0 < WAIT_S / 2
    assert got["events"] == [] and got["squeue"] == ""
    assert got["status"]["state"] == RunnerState.WAITING_SPEC


def test_a_pending_job_is_waited_on_until_its_first_event(squeue: Squeue, node: Runner) -> None:
    squeue.row("42", "PENDING")
    after = node.log.last_seq
    with subprocess.Popen(
        argv(remote.EVENTS_PY, *events_args(node, after, 100)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=squeue.env,
    ) as proc:
        wait_until(squeue.calls, 30, "the script to ask squeue while it waits")
        assert proc.poll() is None  # still waiting: a pending job gets its wait
        seq = node.log.append_log(LogStream.STDOUT, "started\n")
        out, err = proc.communicate(timeout=WAIT_S / 2)
    got = answer(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    assert [Event.model_validate_json(line).seq for line in got["events"]] == [seq]


def test_statuses_of_many_runs_in_one_answer(squeue: Squeue, node: Runner, tmp_path: Path) -> None:
    squeue.rows(
        {
            job: {"JobID": job, "State": st, "Reason": "None", "RestartCnt": 1, "NodeList": "n"}
            for job, st in (("11", "RUNNING"), ("12", "PENDING"))
        }
    )
    garbled = tmp_path / "garbled"
    garbled.mkdir()
    (garbled / STATUS_FILE).write_text("{not json")
    dirs = [str(node.config.state_dir), str(tmp_path / "missing"), str(garbled)]
    res = subprocess.run(
        argv(remote.STATUSES_PY, parse.SQUEUE_FIELDS),
        input=json.dumps({"jobs": ["11", "12", "13"], "dirs": dirs}),
        capture_output=True,
        text=True,
        env=squeue.env,
        timeout=60,
    )
    got = answer(res)
    rows = parse.parse_squeue(got["squeue"])
    assert {j: (r.state, r.restarts) for j, r in rows.items()} == {
        "11": ("RUNNING", 1),
        "12": ("PENDING", 1),
    }
    assert squeue.calls() == [["-h", "-t", "all", "-j", "11,12,13", "-O", parse.SQUEUE_FIELDS]]
    assert got["status"][dirs[0]]["state"] == RunnerState.WAITING_SPEC
    assert got["status"][dirs[1]] is None and got["status"][dirs[2]] is None


def test_statuses_without_jobs_ask_squeue_nothing(squeue: Squeue, node: Runner) -> None:
    res = subprocess.run(
        argv(remote.STATUSES_PY, parse.SQUEUE_FIELDS),
        input=json.dumps({"jobs": [], "dirs": [str(node.config.state_dir)]}),
        capture_output=True,
        text=True,
        env=squeue.env,
        timeout=60,
    )
    got = answer(res)
    assert got["squeue"] == "" and squeue.calls() == []
    assert got["status"][str(node.config.state_dir)]["exit_code"] is None


def test_each_script_runs_as_a_file(squeue: Squeue, node: Runner) -> None:
    """``python FILE ARGS`` is the same program (a reader may run one by hand)."""
    squeue.row("42", "RUNNING")
    res = subprocess.run(
        [sys.executable, "-I", "-S", str(SCRIPTS / "events.py"), *events_args(node, 0, 1)],
        capture_output=True,
        text=True,
        env=squeue.env,
        timeout=60,
    )
    assert [Event.model_validate_json(line).seq for line in answer(res)["events"]] == [1]
