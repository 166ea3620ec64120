"""A seeded store (runs in every state, attempts, a matrix, metrics, kept logs) and the
``tcl ui`` app over it, driven in-process with FastAPI's TestClient, or served by the real
``tcl ui`` for the browser tests (:func:`page_url`)."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tcl.control.config import Config, load_config_at
from tcl.control.logcache import KeptEvent, LogCache
from tcl.control.metricstore import MetricStore
from tcl.control.phasestore import PhaseStore
from tcl.control.runrequest import RunRequest
from tcl.control.states import AttemptCause, RunState
from tcl.control.store import Store
from tcl.control.sweep.model import EntryState
from tcl.control.sweep.queue import NewEntry, SweepQueue
from tcl.runner.api import Event, EventKind, LogStream, RunnerState
from tcl.ui.app import create_app
from tcl.ui.context import Ui, UiSettings
from tests.integration.tclcli import TCL, TclEnv
from tests.integration.ui.crowd import seed_crowd
from tests.integration.ui.test_cli import _first_line

with warnings.catch_warnings():
    # Starlette wants `httpx2` for its TestClient; httpx is what this project has. The tests
    # import it from here, without the warning (hence the explicit re-export).
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient as TestClient

TOKEN = "t" * 43
BASE = "http://127.0.0.1:8765"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# what the page's own requests carry besides the token: its origin, and the header that
# state-changing requests need (a request from another origin cannot add it without CORS)
OWN = {"Origin": BASE, "X-Tcl-UI": "1"}
PAGE = {**AUTH, **OWN}
OWNER = "sched-test"


@dataclass
class Seeded:
    store: Store
    config: Config
    state_dir: Path


def _advance(store: Store, run_id: str, *states: RunState) -> None:
    for st in states:
        store.set_state(run_id, st)


def _metric(seq: int, step: int | None, kind: str, **values: float) -> KeptEvent:
    data: dict[str, object] = {"kind": kind, **values}
    if step is not None:
        data["step"] = step
    return KeptEvent(seq=seq, ts=1000.0 + seq, kind=EventKind.METRIC, data=json.dumps(data))


def seed(store: Store) -> None:
    """Runs: ok-run (succeeded, logs kept, metrics), bad-run (failed, exit 3), live-run
    (running), wait-run (pending, never placed); a matrix ``sweep`` of 6 entries: 2 done,
    2 failed, 1 running, 1 queued."""
    store.create_run(
        "ok-run",
        "train-small",
        RunRequest(argv=["python", "train.py", "--lr", "0.1"], chip="h100", chips=2),
    )
    store.set_placement("ok-run", "here", "local", None)
    store.add_attempt("ok-run", "here", "local")
    _advance(store, "ok-run", RunState.PROVISIONING, RunState.RUNNING)
    store.set_state("ok-run", RunState.SUCCEEDED, exit_code=0)
    store.create_run("bad-run", "eval-big", RunRequest(argv=["python", "eval.py"], chips=1))
    store.set_placement("bad-run", "farbox", "ssh", None)
    store.add_attempt("bad-run", "farbox", "ssh")
    store.update_attempt("bad-run", 0, state=RunState.TERMINATED, cause=AttemptCause.PREEMPTED)
    store.add_attempt("bad-run", "farbox", "ssh")
    _advance(store, "bad-run", RunState.PROVISIONING, RunState.RUNNING)
    store.set_state("bad-run", RunState.FAILED, exit_code=3, message="exit code 3")
    store.update_attempt("bad-run", 1, state=RunState.FAILED, cause=AttemptCause.EXIT)
    store.create_run("live-run", "train-live", RunRequest(argv=["bash", "-c", "sleep 1000"]))
    _advance(store, "live-run", RunState.PROVISIONING, RunState.RUNNING)
    store.create_run("wait-run", "<b>waiting</b>", RunRequest(job="lm1b", chips=4))
    MetricStore(store).add(
        "ok-run",
        [
            _metric(2, 1, "train", loss=2.0, lr=0.1),
            _metric(3, 2, "train", loss=1.5, lr=0.1),
            _metric(4, 2, "val", val_loss=1.7),
            _metric(6, 3, "train", loss=1.2, lr=0.1),
        ],
    )
    t0 = store.attempts("ok-run")[0].created_at  # its attempt's start, phase by phase
    PhaseStore(store).add(
        "ok-run",
        [
            KeptEvent(seq=10 + i, ts=t0 + dt, kind=EventKind.PHASE, data=name)
            for i, (name, dt) in enumerate(
                [
                    ("runner_ready", 0.5),
                    ("job_started", 0.75),
                    ("compiled", 3.0),
                    ("first_step", 3.25),
                ]
            )
        ]
        + [KeptEvent(seq=20, ts=t0 + 9.0, kind=EventKind.METRIC, data='{"step":9,"loss":1.0}')],
    )
    cache = LogCache("ok-run")
    cache.append(
        [
            Event(seq=1, ts=1001.0, kind=EventKind.LOG, stream=LogStream.STDOUT, data="hello\n"),
            Event(
                seq=2, ts=1002.0, kind=EventKind.METRIC, data='{"step":1,"kind":"train","loss":2}'
            ),
            Event(seq=3, ts=1003.0, kind=EventKind.LOG, stream=LogStream.STDERR, data="<warn>\n"),
            Event(seq=4, ts=1004.0, kind=EventKind.STATE, state=RunnerState.SUCCEEDED, exit_code=0),
        ]
    )
    q = SweepQueue(store)
    q.add("sweep", {"argv": ["true"]}, [NewEntry(f"j{i}", {"lr": 0.1 * i}) for i in range(6)])
    ids = {e.job_id: e.id for e in q.entries("sweep")}
    q.claim(OWNER, limit=100, lease_s=600)
    for job in ("j0", "j1", "j2", "j3", "j4"):
        q.started(OWNER, ids[job])
    q.finish(OWNER, ids["j0"], EntryState.DONE)
    q.finish(OWNER, ids["j1"], EntryState.DONE)
    q.finish(OWNER, ids["j2"], EntryState.FAILED, "Traceback\nValueError: nan loss")
    q.finish(OWNER, ids["j3"], EntryState.FAILED, "exit code 1")
    q.release(OWNER, ids["j5"], not_before=0.0)
    q.close()


def silent_listener() -> tuple[int, Callable[[], None]]:
    """A TCP port that accepts and never says a word (an SSH server that hangs)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()

    def close() -> None:
        stop.set()
        t.join(2)
        for c in held:
            c.close()
        srv.close()

    return srv.getsockname()[1], close


@pytest.fixture
def seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Seeded]:
    state = tmp_path / "state"
    monkeypatch.setenv("TCL_STATE_DIR", str(state))
    port, close = silent_listener()
    empty = tmp_path / "ssh_config"
    empty.write_text("")
    (tmp_path / "known_hosts").write_text("")
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(
        "hosts:\n"
        f"  deadbox: {{type: ssh, ssh: 127.0.0.1, port: {port}, connect_timeout_s: 60,\n"
        f"            ssh_config_file: {empty}, known_hosts: {tmp_path / 'known_hosts'}}}\n"
    )
    store = Store(f"sqlite:///{tmp_path / 'tcl.db'}")
    seed(store)
    yield Seeded(store, load_config_at(cfg_path, True), state)
    store.close()
    close()


MakeClient = Callable[..., TestClient]


@pytest.fixture
def make_client(seeded: Seeded) -> Iterator[MakeClient]:
    """``make_client(allow_actions=False, start_scheduler=None, **client_kwargs)``."""
    made: list[TestClient] = []

    def make(
        allow_actions: bool = False,
        start_scheduler: Callable[[], str] | None = None,
        base_url: str = BASE,
        headers: dict[str, str] | None = None,
    ) -> TestClient:
        settings = UiSettings(
            token=TOKEN,
            allow_actions=allow_actions,
            port=8765,
            hosts_timeout_s=1.0,
            stop_grace_s=1.0,
        )
        ui = Ui(settings, seeded.store, lambda: seeded.config, start_scheduler)
        client = TestClient(create_app(ui), base_url=base_url, headers=headers)
        client.__enter__()
        made.append(client)
        return client

    yield make
    for c in made:
        c.__exit__(None, None, None)


@pytest.fixture
def client(make_client: MakeClient) -> TestClient:
    """A client that sends what the page sends: the token, its origin, the action header."""
    return make_client(headers=PAGE)


Seeder = Callable[[Store], None]


@contextlib.contextmanager
def served(root: Path, seeders: list[Seeder]) -> Iterator[str]:
    """The real ``tcl ui --allow-actions`` over a store the seeders filled, under ``root``;
    yields the URL it printed. A requeue starts no ``tcl serve`` (``TCL_SERVE=0``)."""
    env = TclEnv(home=root / "home", config=root / "config.yaml", repo=root)
    state = env.home / "state"
    state.mkdir(parents=True)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TCL_STATE_DIR", str(state))  # where seed() keeps its logs
        store = Store(f"sqlite:///{state / 'tcl.db'}")
        for fill in seeders:
            fill(store)
        store.close()
    with socket.socket() as s:  # a port nobody listens on: the host is refused at once
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    empty = root / "ssh_config"
    empty.write_text("")
    (root / "known_hosts").write_text("")
    env.config.write_text(
        f"hosts:\n  deadbox: {{type: ssh, ssh: 127.0.0.1, port: {closed}, "
        f"ssh_config_file: {empty}, known_hosts: {root / 'known_hosts'}}}\n"
    )
    proc = subprocess.Popen(
        [TCL, "ui", "--no-browser", "--allow-actions"],
        cwd=root,
        env={**env.env(), "TCL_SERVE": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield _first_line(proc, 30)
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


@pytest.fixture
def page_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The real ``tcl ui --allow-actions`` over the seeded store; yields the URL it printed."""
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path / "home" / "state"))  # the test's reads
    with served(tmp_path, [seed]) as url:
        yield url


@pytest.fixture(scope="module")
def crowd_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The real ``tcl ui`` over :func:`seed`'s runs and a crowd (``crowd.py``: 2,000 runs,
    a 1,200-entry matrix, a run with a log of mixed levels), shared by a module's tests
    (they only look)."""
    with served(tmp_path_factory.mktemp("crowd"), [seed, seed_crowd]) as url:
        yield url
