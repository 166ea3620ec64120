"""Following at the agent seam: fake runner/shim (no network), real store and log cache."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tcl.control.backends.base import Progress
from tcl.control.backends.shim import ShimBackend
from tcl.control.backends.shimhost import ShimHost
from tcl.control.backends.table import BACKENDS
from tcl.control.config import default_config
from tcl.control.errors import AgentUnreachableError
from tcl.control.lifecycle.follow import follow
from tcl.control.lifecycle.refresh import refresh
from tcl.control.lifecycle.stop import stop
from tcl.control.logcache import KeptEvent, LogCache
from tcl.control.runrequest import RunRequest
from tcl.control.service import Control
from tcl.control.shipping import Snapshot
from tcl.control.states import AttemptCause, RunState
from tcl.control.store import Store
from tcl.runner.api import Event, EventKind, EventsPage, JobSpec, LogStream, RunnerState
from tcl.shim.api import ExecutorKind, Ports, TaskInfo, TaskSpec, TerminationReason

N = 10


class FakeRunner:
    """Serves N log lines then a final state, 3 per page; drops the connection once."""

    def __init__(self, drop_at_call: int | None) -> None:
        self.log = [
            Event(
                seq=i + 1,
                ts=1.0 + i,
                kind=EventKind.LOG,
                stream=LogStream.STDOUT,
                data=f"line {i}\n",
            )
            for i in range(N)
        ] + [
            Event(
                seq=N + 1, ts=99.0, kind=EventKind.STATE, state=RunnerState.SUCCEEDED, exit_code=0
            )
        ]
        self.calls: list[int] = []
        self.drop_at_call = drop_at_call
        self.stopped = False

    async def healthcheck(self) -> dict[str, Any]:
        if self.stopped:
            return {"state": "terminated"}
        return {"state": "succeeded" if self.calls and max(self.calls) >= N else "running"}

    async def submit(self, spec: JobSpec) -> None: ...

    async def upload_code(
        self, path: Path, sha256: str, progress: Progress | None = None, *, ask_cache: bool = True
    ) -> None:
        return None

    async def use_cached_code(self, sha256: str) -> bool:
        return False

    async def run(self) -> None: ...

    async def start(self, spec: JobSpec) -> RunnerState | None:
        return None  # as a runner older than /api/start: the launch submits, ships, runs

    async def events(self, after: int, wait_s: float = 0.0, limit: int = 1000) -> EventsPage:
        self.calls.append(after)
        if len(self.calls) == self.drop_at_call:
            raise AgentUnreachableError("runner: connection reset")
        page = [e for e in self.log if e.seq > after][:3]
        last = page[-1].seq if page else after
        if self.stopped:  # SIGTERM: the runner ends `terminated` with the signal's code
            return EventsPage(
                events=[], next=after, more=False, state=RunnerState.TERMINATED, exit_code=-15
            )
        done = last == N + 1
        return EventsPage(
            events=page,
            next=last,
            more=not done,
            state=RunnerState.SUCCEEDED if done else RunnerState.RUNNING,
            exit_code=0 if done else None,
        )

    async def stop(self, grace_s: float = 10.0, dump_stacks: bool = False) -> None:
        self.stopped = True

    async def aclose(self) -> None: ...


class FakeShim:
    def __init__(self) -> None:
        self.terminated: list[tuple[str, TerminationReason]] = []
        self.removed: list[str] = []

    async def terminate_task(
        self,
        task_id: str,
        reason: TerminationReason = TerminationReason.STOPPED_BY_USER,
        message: str = "",
    ) -> TaskInfo:
        self.terminated.append((task_id, reason))
        return TaskInfo(
            id=task_id,
            name="",
            status="terminated",
            network="host",
            executor=ExecutorKind.PROCESS,
            created_at=0,
            updated_at=0,
        )

    async def remove_task(self, task_id: str) -> None:
        self.removed.append(task_id)

    async def host(self) -> Any: ...

    async def create_task(self, spec: TaskSpec) -> TaskInfo:
        raise NotImplementedError("these tests start no task")

    async def get_task(self, task_id: str) -> TaskInfo:
        # The runner's port and token come from the shim (control never stores the token).
        return TaskInfo(
            id=task_id,
            name="",
            status="running",
            network="host",
            executor=ExecutorKind.PROCESS,
            ports=Ports(runner=1),
            runner_token="t" * 43,
            created_at=0,
            updated_at=0,
        )

    async def aclose(self) -> None: ...


class FakeBackend(ShimHost):
    """One host of the shim-based backend, with a fake shim and runner."""

    executor = ExecutorKind.PROCESS

    def __init__(self, runner: FakeRunner, shim: FakeShim) -> None:
        self.name = "local"
        self._runner, self._shim = runner, shim
        self.resets = 0
        self.opened = 0  # runner clients asked for

    def peer_address(self) -> str:
        return "127.0.0.1"

    async def shim(self) -> Any:
        return self._shim

    async def runner(self, runner_port: int, token: str, label: str) -> Any:
        assert token, "control must reach a runner with its bearer token"
        self.opened += 1
        return self._runner

    async def ship_code(
        self,
        snap: Snapshot,
        runner_port: int,
        runner_token: str,
        runner: Any,
        progress: Progress | None,
        *,
        cache_checked: bool = False,
    ) -> int:
        return 0

    async def reset(self) -> None:
        self.resets += 1


def use_hosts(monkeypatch: pytest.MonkeyPatch, **hosts: ShimHost) -> None:
    """Put a shim-based backend whose hosts are these fakes in the backend table."""

    class Fakes(ShimBackend):
        kind = "local"

        def _make_host(self, name: str, record: Any) -> ShimHost:
            if name not in hosts:
                raise self.unknown_host(name)
            hosts[name].name = name
            return hosts[name]

    monkeypatch.setitem(BACKENDS, "local", Fakes)


@pytest.fixture
def ctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Control:
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path))
    c = Control(default_config(), Store(f"sqlite:///{tmp_path / 'tcl.db'}"))
    c.store.create_run("r-1", "", RunRequest(argv=["x"]))
    c.store.set_state("r-1", RunState.PROVISIONING)
    c.store.set_placement("r-1", "local", "local", None)
    c.store.add_attempt("r-1", "local", "local", {"task_id": "r-1-0", "runner_port": 1})
    c.store.set_state("r-1", RunState.RUNNING)
    return c


async def test_follow_survives_a_drop_without_loss_or_repeat(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, shim = FakeRunner(drop_at_call=2), FakeShim()
    backend = FakeBackend(runner, shim)
    use_hosts(monkeypatch, local=backend)
    seen: list[str] = []
    drops: list[str] = []
    final = await follow(
        ctl, ctl.store.get_run("r-1"), lambda e: seen.append(e.data or ""), drops.append
    )
    logs = [s for s in seen if s.startswith("line")]
    assert logs == [f"line {i}\n" for i in range(N)]
    assert drops == ["runner: connection reset"] and backend.resets == 1
    assert runner.calls[:3] == [0, 3, 3]  # the retry resumes from the kept cursor
    assert final.state is RunState.SUCCEEDED and final.exit_code == 0
    assert shim.terminated == [("r-1-0", TerminationReason.DONE)]  # accelerators freed
    assert shim.removed == ["r-1-0"]  # every event is kept here: the runner can go
    att = ctl.store.latest_attempt("r-1")
    assert att is not None and att.log_cursor == N + 1
    # a second follow replays the kept copy and never contacts the host again
    runner.calls.clear()
    again: list[str] = []
    await follow(ctl, ctl.store.get_run("r-1"), lambda e: again.append(e.data or ""))
    assert [s for s in again if s.startswith("line")] == logs and runner.calls == []
    assert LogCache("r-1").last_seq() == N + 1


async def test_a_runner_s_client_is_kept_from_one_pull_to_the_next(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked anew for each pull, a client cost a call to the shim and a new connection (an SSH
    channel) before each long-poll, and each store write a commit: a printed line waited for
    both. Kept, the client is asked for again only after its runner stopped answering; the
    attempt's row is written when something in it changes (here: its end), not per page."""
    runner, shim = FakeRunner(drop_at_call=2), FakeShim()
    backend = FakeBackend(runner, shim)
    use_hosts(monkeypatch, local=backend)
    writes: list[dict[str, Any]] = []
    real_update = ctl.store.update_attempt

    def counted(run_id: str, attempt: int, **kw: Any) -> None:
        writes.append(kw)
        real_update(run_id, attempt, **kw)

    monkeypatch.setattr(ctl.store, "update_attempt", counted)
    final = await follow(ctl, ctl.store.get_run("r-1"), lambda e: None)
    assert final.state is RunState.SUCCEEDED
    assert len(runner.calls) == 5  # 4 pages of 3 events, one of them dropped and asked again
    assert backend.opened == 2  # the first client, and a new one after the drop
    assert [w.get("log_cursor") for w in writes if "log_cursor" in w] == [N + 1]


async def test_stop_keeps_the_first_outcome_and_frees_the_task(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, shim = FakeRunner(drop_at_call=None), FakeShim()
    use_hosts(monkeypatch, local=FakeBackend(runner, shim))
    run = await stop(ctl, ctl.store.get_run("r-1"), grace_s=0)
    assert runner.stopped
    assert run.state is RunState.TERMINATED and run.exit_code == -15
    assert shim.terminated[0] == ("r-1-0", TerminationReason.STOPPED_BY_USER)
    # a late stop of a finished run changes nothing
    assert (await stop(ctl, ctl.store.get_run("r-1"))).state is RunState.TERMINATED


class ExpiredShim(FakeShim):
    """The task ended while nobody followed, and the retention removed its runner."""

    async def get_task(self, task_id: str) -> TaskInfo:
        return TaskInfo(
            id=task_id,
            name="",
            status="terminated",
            network="host",
            termination_reason=TerminationReason.FAILED,
            exit_code=3,
            message="the job failed",
            executor=ExecutorKind.PROCESS,
            created_at=0,
            updated_at=0,
        )


async def test_a_run_whose_runner_the_host_removed_gets_its_outcome(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = FakeRunner(drop_at_call=None)
    use_hosts(monkeypatch, local=FakeBackend(runner, ExpiredShim()))
    final = await follow(ctl, ctl.store.get_run("r-1"), lambda e: None)
    assert (final.state, final.exit_code) == (RunState.FAILED, 3)
    assert "retention" in (final.message or "") and runner.calls == []
    assert (await refresh(ctl, final)).state is RunState.FAILED  # `tcl ps`: settled


class MetricRunner(FakeRunner):
    """Its job printed metric lines between its log lines (every third event a metric)."""

    def __init__(self, drop_at_call: int | None) -> None:
        super().__init__(drop_at_call)
        for e in self.log[:N]:
            if e.seq % 3 == 0:
                e.kind = EventKind.METRIC
                e.data = f'{{"kind":"train","loss":{e.seq / 10},"step":{e.seq}}}'


async def test_a_pull_keeps_metric_events_in_the_store(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = MetricRunner(drop_at_call=2)
    use_hosts(monkeypatch, local=FakeBackend(runner, FakeShim()))
    seen: list[EventKind] = []
    final = await follow(ctl, ctl.store.get_run("r-1"), lambda e: seen.append(e.kind), None)
    assert final.state is RunState.SUCCEEDED  # the follow ends on the final state
    assert seen.count(EventKind.METRIC) == 3 and seen[-1] is EventKind.STATE
    points = ctl.metrics.read("r-1")
    assert [(p.seq, p.step, p.kind, p.values) for p in points] == [
        (i + 1, s, "train", {"loss": s / 10}) for i, s in enumerate((3, 6, 9))
    ]
    assert [e.seq for e in LogCache("r-1").read() if e.kind is EventKind.METRIC] == [3, 6, 9]


def test_log_cache_appends_only_newer_events(tmp_path: Path) -> None:
    cache = LogCache("r", tmp_path)
    ev = [Event(seq=i, ts=0.0, kind=EventKind.LOG, data=f"{i}\n") for i in range(1, 6)]
    assert [e.seq for e in cache.append(ev[:3])] == [1, 2, 3]
    assert [e.seq for e in cache.append(ev[1:])] == [4, 5]  # overlap: no repeats
    assert [e.seq for e in LogCache("r", tmp_path).read()] == [1, 2, 3, 4, 5]
    assert LogCache("r", tmp_path).last_seq() == 5


class DeadRunner(FakeRunner):
    async def events(self, after: int, wait_s: float = 0.0, limit: int = 1000) -> EventsPage:
        raise AgentUnreachableError("runner: connection refused")

    async def healthcheck(self) -> dict[str, Any]:
        raise AgentUnreachableError("runner: connection refused")


class VanishedShim(FakeShim):
    """The task ended `vanished` (its runner died) but the shim still lists its port."""

    async def get_task(self, task_id: str) -> TaskInfo:
        return TaskInfo(
            id=task_id,
            name="",
            status="terminated",
            network="host",
            termination_reason=TerminationReason.VANISHED,
            message="runner gone",
            executor=ExecutorKind.PROCESS,
            ports=Ports(runner=1),
            runner_token="t" * 43,
            created_at=0,
            updated_at=0,
        )


async def test_refresh_settles_a_run_whose_task_ended_without_a_reachable_runner(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_hosts(monkeypatch, local=FakeBackend(DeadRunner(None), VanishedShim()))
    run = await refresh(ctl, ctl.store.get_run("r-1"))
    assert run.state is RunState.FAILED and "runner gone" in run.message


class UnreachableShim(FakeShim):
    async def get_task(self, task_id: str) -> TaskInfo:
        raise AgentUnreachableError("shim local: connection refused")


async def test_an_unreachable_host_shows_unknown_since_the_first_failure(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tcl.control.runlisting import state_text

    backend = FakeBackend(FakeRunner(None), UnreachableShim())
    use_hosts(monkeypatch, local=backend)
    run = await refresh(ctl, ctl.store.get_run("r-1"))
    assert run.state is RunState.RUNNING  # not a new terminal state
    (first,) = ctl.store.unreachable_since(["r-1"]).values()
    await refresh(ctl, run)
    assert ctl.store.unreachable_since(["r-1"]) == {"r-1": first}  # the first failure's time
    # in a user's words: not the job's failure, and tcl goes on trying (issue 31)
    said = state_text(run, first)
    assert said.startswith(f"unknown: tcl lost contact with host {run.host} "), said
    assert said.endswith(" ago; retrying"), said
    backend._shim = FakeShim()  # reachable again: cleared
    await refresh(ctl, run)
    assert ctl.store.unreachable_since(["r-1"]) == {}


class SlowShim(VanishedShim):
    """A slow login node: each answer takes a while (the task ended meanwhile)."""

    async def get_task(self, task_id: str) -> TaskInfo:
        await asyncio.sleep(0.3)
        return await super().get_task(task_id)


async def test_a_slow_host_is_waited_for_and_never_shown_unreachable(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_hosts(monkeypatch, local=FakeBackend(DeadRunner(None), SlowShim()))
    run = await refresh(ctl, ctl.store.get_run("r-1"), timeout_s=0.05)
    assert run.state is RunState.RUNNING  # slower than asked: the stored state stands
    assert ctl.store.unreachable_since(["r-1"]) == {}  # slow is not unreachable
    run = await refresh(ctl, run)  # the default waits for it
    assert run.state is RunState.FAILED and "runner gone" in run.message  # its real state
    assert ctl.store.unreachable_since(["r-1"]) == {}


def test_a_host_gone_from_the_config_is_reached_through_the_attempts_record(
    ctl: Control,
) -> None:
    from tcl.control.backends.local import LocalShimHost
    from tcl.control.backends.shim import ShimBackend
    from tcl.control.backends.ssh import SshShimHost
    from tcl.control.placement import LocalPlacement, SshPlacement, dump_placement

    rec = SshPlacement(
        ssh="gpu1.example",
        port=2222,
        user="me",
        identity_file="~/.ssh/k",
        proxy_jump="bastion",
        shim_dir="/home/me/.tcl-shim",
        shim_port=11000,
    )
    ctl.store.create_run("r-2", "", RunRequest(argv=["x"]))
    handle = {"task_id": "r-2-0", "placement": dump_placement(rec)}  # stored before nodes
    ctl.store.add_attempt("r-2", "gone", "ssh", handle)
    att = ctl.store.latest_attempt("r-2")
    assert att is not None
    sb, h = ctl.backend_for(att), ctl.handle(att)
    assert isinstance(sb, ShimBackend) and h.node_count == 1
    b = sb._node_host(h.nodes[0])  # type: ignore[attr-defined]
    assert isinstance(b, SshShimHost) and b.name == "gone"
    assert (b.target.host, b.target.port, b.target.user, b.target.proxy_jump) == (
        "gpu1.example",
        2222,
        "me",
        "bastion",
    )
    assert (b.cfg.shim_dir, b.cfg.shim_port) == ("/home/me/.tcl-shim", 11000)
    local = LocalPlacement(shim_state_dir="/x/local-shim")
    handle = {"task_id": "r-2-1", "placement": dump_placement(local)}
    ctl.store.add_attempt("r-2", "old-local", "local", handle)
    att = ctl.store.latest_attempt("r-2")
    assert att is not None
    lsb, lh = ctl.backend_for(att), ctl.handle(att)
    lb = lsb._node_host(lh.nodes[0])  # type: ignore[attr-defined]
    assert isinstance(lb, LocalShimHost) and str(lb.shim_state_dir) == "/x/local-shim"


async def test_a_run_with_no_way_to_its_host_can_still_be_stopped(ctl: Control) -> None:
    """A run placed before attempts kept a record, on a host gone from the config."""
    ctl.store.create_run("r-3", "", RunRequest(argv=["x"]))
    ctl.store.set_state("r-3", RunState.PROVISIONING)
    ctl.store.add_attempt("r-3", "gone", "ssh", {"task_id": "r-3-0"})
    ctl.store.set_state("r-3", RunState.RUNNING)
    run = await stop(ctl, ctl.store.get_run("r-3"), grace_s=0)
    assert run.state is RunState.TERMINATED and "not in the config" in run.message


def test_run_writers_refuse_illegal_moves(ctl: Control) -> None:
    from tcl.control.errors import StateConflict

    ctl.store.set_state("r-1", RunState.SUCCEEDED)
    with pytest.raises(StateConflict, match="succeeded → running"):
        ctl.store.set_state("r-1", RunState.RUNNING)
    assert ctl.store.set_state("r-1", RunState.FAILED) is False  # the first outcome is kept
    assert ctl.store.get_run("r-1").state is RunState.SUCCEEDED
    ctl.store.update_attempt("r-1", 0, state=RunState.SUCCEEDED, cause=AttemptCause.EXIT)
    with pytest.raises(StateConflict, match="attempt 0"):
        ctl.store.update_attempt("r-1", 0, state=RunState.PROVISIONING)
    # the store numbers attempts: a second one is 1, whatever the caller thinks
    assert ctl.store.add_attempt("r-1", "local", "local").attempt == 1


class LongRunner(FakeRunner):
    """A long log: 600 lines, 3 a page, then its end."""

    def __init__(self) -> None:
        super().__init__(drop_at_call=None)
        n = 600
        self.log = [
            Event(seq=i + 1, ts=1.0, kind=EventKind.LOG, stream=LogStream.STDOUT, data=f"{i}\n")
            for i in range(n)
        ] + [Event(seq=n + 1, ts=2.0, kind=EventKind.STATE, state=RunnerState.SUCCEEDED)]

    async def events(self, after: int, wait_s: float = 0.0, limit: int = 1000) -> EventsPage:
        page = [e for e in self.log if e.seq > after][:3]
        last = page[-1].seq if page else after
        done = last == len(self.log)
        state = RunnerState.SUCCEEDED if done else RunnerState.RUNNING
        return EventsPage(events=page, next=last, more=not done, state=state)


async def test_following_a_long_log_reads_each_kept_line_once(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pulls that keep a log and the follow that shows it take in only what was appended
    since they last looked: each kept line is parsed about twice (once by each), not once per
    page after it (which made a long log's follow quadratic: 120,000 parses here)."""
    runner = LongRunner()
    use_hosts(monkeypatch, local=FakeBackend(runner, FakeShim()))
    parsed = 0
    real = KeptEvent.model_validate_json.__func__  # type: ignore[attr-defined]

    def counted(cls: type[KeptEvent], /, data: str | bytes, **kw: Any) -> KeptEvent:
        nonlocal parsed
        parsed += 1
        return real(cls, data, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(KeptEvent, "model_validate_json", classmethod(counted))
    shown: list[str] = []
    final = await follow(ctl, ctl.store.get_run("r-1"), lambda e: shown.append(e.data or ""))
    assert final.state is RunState.SUCCEEDED
    assert [s for s in shown if s.endswith("\n")] == [f"{i}\n" for i in range(600)]
    assert parsed <= 3 * len(runner.log), parsed
