"""The control plane's multi-node rules at the backend seam (a scripted backend, real store):
a node whose job fails stops the others; a node the host lost is placed again as attempt + 1."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from tcl.control.backends.base import (
    RUNNER_STATES,
    Backend,
    Handle,
    HostCheck,
    Launched,
    NodeOffer,
    NodePage,
    Observer,
    Offer,
    Offers,
    RunStatus,
)
from tcl.control.backends.table import BACKENDS
from tcl.control.config import default_config
from tcl.control.lifecycle.pull import pull
from tcl.control.lifecycle.retry_policy import RetryPolicy
from tcl.control.logcache import LogCache
from tcl.control.paths import cache_dir
from tcl.control.runrequest import RunRequest
from tcl.control.service import Control
from tcl.control.shipping import Snapshot
from tcl.control.solver import Request
from tcl.control.states import AttemptCause, RunState
from tcl.control.store import Store
from tcl.runner.api import Event, EventKind, JobSpec, RunnerState


class TwoNodes(Handle):
    gen: int = 0

    @property
    def node_count(self) -> int:
        return 2


class Scripted(Backend):
    """Two nodes whose pages the test sets; records stops, launches and releases."""

    kind = "local"
    handle_model = TwoNodes
    pages: ClassVar[dict[int, NodePage]] = {}
    stops: ClassVar[list[int]] = []
    launched: ClassVar[list[JobSpec]] = []
    released: ClassVar[list[int]] = []
    dumps: ClassVar[list[bool]] = []  # each stop's dump_stacks
    # hand the launched handle to ``on_handle`` before returning (as the shim's backend does
    # once its tasks answer)
    records_handle: ClassVar[bool] = False

    async def offers(self, req: Request, hosts: Sequence[str]) -> Offers:
        return Offers(
            [
                Offer(
                    backend="local",
                    host="local",
                    nodes=(NodeOffer("local"),) * 2,
                    chip=None,
                    chips_per_node=0,
                )
            ]
        )

    async def launch(
        self,
        plan: Offer,
        job: JobSpec,
        snap: Snapshot,
        image: str | None,
        obs: Observer,
        on_handle: Callable[[Handle], None],
    ) -> Launched:
        self.launched.append(job)
        launched = Launched(TwoNodes(kind="local", gen=len(self.launched)), [[], []])
        if self.records_handle:
            on_handle(launched.handle)
        return launched

    def dry_run(self, plan: Offer, job: JobSpec, image: str | None) -> str:
        return ""

    async def events(self, handle: Handle, node: int, after: int, wait_s: float) -> NodePage:
        return self.pages[node]

    async def status(self, handle: Handle) -> RunStatus:
        return RunStatus(RunState.RUNNING)

    async def stop(self, handle: Handle, grace_s: float, dump_stacks: bool = False) -> None:
        assert isinstance(handle, TwoNodes)
        self.stops.append(handle.gen)
        self.dumps.append(dump_stacks)

    async def release(self, handle: Handle, state: RunState) -> None:
        assert isinstance(handle, TwoNodes)
        self.released.append(handle.gen)

    async def check(self, host: str) -> HostCheck:
        return HostCheck(True, "")


@pytest.fixture
def ctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Control:
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path))
    monkeypatch.setitem(BACKENDS, "local", Scripted)
    Scripted.pages, Scripted.stops, Scripted.launched, Scripted.released = {}, [], [], []
    Scripted.dumps = []
    (cache_dir() / f"{'a' * 64}.tar.gz").write_bytes(b"code")
    c = Control(default_config(), Store(f"sqlite:///{tmp_path / 'tcl.db'}"))
    c.store.create_run(
        "r-1", "", RunRequest(argv=["train"], chips=0, job_cwd="sub", env={"A": "1"})
    )
    c.store.set_state("r-1", RunState.PROVISIONING)
    c.store.set_placement("r-1", "local", "local", "a" * 64)
    c.store.add_attempt("r-1", "local", "local", {"kind": "local", "gen": 0})
    c.store.set_state("r-1", RunState.RUNNING)
    return c


async def test_a_failed_node_stops_the_others_and_the_run_names_it(ctl: Control) -> None:
    Scripted.pages = {0: NodePage([], RunState.RUNNING), 1: _ended(3)}
    await pull(ctl, ctl.store.get_run("r-1"))
    assert Scripted.stops == [0] and Scripted.dumps == [False]
    # the attempt ends once the others did: their last lines are pulled first
    assert ctl.store.get_run("r-1").state is RunState.RUNNING
    Scripted.pages[0] = _ended(143, RunnerState.TERMINATED)
    for _ in range(3):  # node 0's end, then every node asked once more for the final word
        if (await pull(ctl, ctl.store.get_run("r-1"))).state.is_final:
            break
    assert Scripted.stops == [0]  # node 1's end was kept: nothing stopped twice
    run = ctl.store.get_run("r-1")
    assert run.state is RunState.FAILED and run.exit_code == 3, run
    assert run.message == "node 1 failed (exit code 3); the other nodes were stopped"
    (att,) = ctl.store.attempts("r-1")
    assert (att.state, att.cause) == (RunState.FAILED, AttemptCause.EXIT)


async def test_a_hung_node_s_peers_dump_their_stacks_and_its_retry_policy_places_it_again(
    ctl: Control,
) -> None:
    """One node found hung (its runner dumped its stacks and ended it): the others are stopped
    with SIGABRT so their stacks reach the log too, and the attempt ends ``hung`` through the
    run's retry policy (before: failed at once, whatever the policy), to resume elsewhere."""
    running_with_retries(ctl, "r-2", gen=0)
    Scripted.pages = {0: _ended(134, reason="hung"), 1: NodePage([], RunState.RUNNING)}
    await pull(ctl, ctl.store.get_run("r-2"))
    assert Scripted.stops == [0] and Scripted.dumps == [True]
    Scripted.pages[1] = _ended(134, RunnerState.TERMINATED)
    for _ in range(3):
        res = await pull(ctl, ctl.store.get_run("r-2"), relaunch=False)
        if res.state is not RunState.RUNNING:
            break
    run = ctl.store.get_run("r-2")
    assert run.state is RunState.WAITING_RETRY, run
    assert "(node 0 was found hung (exit code 134); the other nodes were stopped)" in run.message
    (att,) = ctl.store.attempts("r-2")
    assert (att.state, att.cause) == (RunState.FAILED, AttemptCause.HUNG)
    assert Scripted.stops == [0]


async def test_a_node_failing_after_the_others_succeeded_stops_nothing(ctl: Control) -> None:
    Scripted.pages = {
        0: NodePage([], RunState.SUCCEEDED, exit_code=0),
        1: NodePage([], RunState.FAILED, exit_code=3),
    }
    await pull(ctl, ctl.store.get_run("r-1"))
    assert Scripted.stops == []
    assert ctl.store.get_run("r-1").state is RunState.FAILED


async def test_a_lost_node_places_the_run_again_as_its_next_attempt(ctl: Control) -> None:
    Scripted.pages = {
        0: NodePage([], RunState.TERMINATED, message="node tcl-x preempted", lost=True),
        1: NodePage([], RunState.RUNNING),
    }
    await pull(ctl, ctl.store.get_run("r-1"))
    assert Scripted.released == [0]  # what was left of attempt 1 is freed first
    [job] = Scripted.launched
    assert (job.run_id, job.attempt, job.argv, job.cwd, job.env) == (
        "r-1",
        1,
        ["train"],
        "sub",
        {"A": "1"},
    )
    assert job.code is not None and job.code.sha256 == "a" * 64
    attempts = ctl.store.attempts("r-1")
    assert [(a.attempt, a.state) for a in attempts] == [
        (0, RunState.TERMINATED),
        (1, RunState.RUNNING),
    ]
    assert ctl.store.get_run("r-1").state is RunState.RUNNING


async def test_a_lost_run_whose_code_left_the_cache_fails_saying_so(ctl: Control) -> None:
    (cache_dir() / f"{'a' * 64}.tar.gz").unlink()
    Scripted.pages = {
        0: NodePage([], RunState.TERMINATED, message="node tcl-x preempted", lost=True),
        1: NodePage([], RunState.RUNNING),
    }
    await pull(ctl, ctl.store.get_run("r-1"))
    run = ctl.store.get_run("r-1")
    assert run.state is RunState.FAILED
    assert run.message.startswith("node tcl-x preempted; placing it again failed: code aaaa")
    assert Scripted.launched == []


async def test_only_a_follower_places_a_lost_run_again(ctl: Control) -> None:
    """`tcl ps` (refresh) and `tcl logs` pull with a short timeout: a relaunch (minutes for a
    cloud node) would be cut short there, so they leave the run to its follower."""
    Scripted.pages = {
        0: NodePage([], RunState.TERMINATED, message="node tcl-x preempted", lost=True),
        1: NodePage([], RunState.RUNNING),
    }
    res = await pull(ctl, ctl.store.get_run("r-1"), relaunch=False)
    assert not res.more and Scripted.launched == [] and Scripted.released == []
    assert ctl.store.get_run("r-1").state is RunState.RUNNING


async def test_a_sweep_s_lost_run_goes_back_to_its_queue(ctl: Control) -> None:
    """A sweep's run is placed by its scheduler: its owner ends the lost attempt, frees it and
    leaves the run waiting (its entry goes back to the queue), instead of pulling a lost node
    for ever (before: a run nothing would place again)."""
    Scripted.pages = {
        0: NodePage([], RunState.TERMINATED, message="node tcl-x preempted", lost=True),
        1: NodePage([], RunState.RUNNING),
    }
    res = await pull(ctl, ctl.store.get_run("r-1"), relaunch=False, to_queue=True)
    assert res.state is RunState.WAITING_RETRY and Scripted.launched == []
    assert Scripted.released == [0]
    run = ctl.store.get_run("r-1")
    assert run.state is RunState.WAITING_RETRY and "preempted" in run.message, run
    (att,) = ctl.store.attempts("r-1")
    assert (att.state, att.cause) == (RunState.TERMINATED, AttemptCause.NODE_LOST)
    waiting = ctl.retries.waiting("r-1")
    assert waiting is not None and waiting.due


class SlowNode1(Scripted):
    """Node 1 answers 0.3 s after node 0 (past the sibling grace), as a slower host does."""

    async def events(self, handle: Handle, node: int, after: int, wait_s: float) -> NodePage:
        if node == 1:
            await asyncio.sleep(0.3)
        page = self.pages[node]
        return dataclasses.replace(page, events=[e for e in page.events if e.seq > after])


def running_with_retries(ctl: Control, run_id: str, gen: int) -> None:
    """A run with a retry policy (3 attempts, no backoff), running on the two nodes."""
    policy = RetryPolicy(max_attempts=3, backoff_s=0.0)
    ctl.store.create_run(run_id, "", RunRequest(argv=["train"], chips=0, retry=policy))
    ctl.store.set_state(run_id, RunState.PROVISIONING)
    ctl.store.set_placement(run_id, "local", "local", "a" * 64)
    ctl.store.add_attempt(run_id, "local", "local", {"kind": "local", "gen": gen})
    ctl.store.set_state(run_id, RunState.RUNNING)


def _ended(code: int, state: RunnerState | None = None, reason: str | None = None) -> NodePage:
    """A node whose runner ended: its final state event (its state from its exit code unless
    given) and the page it answers."""
    if state is None:
        state = RunnerState.SUCCEEDED if code == 0 else RunnerState.FAILED
    end = Event(seq=1, ts=0.0, kind=EventKind.STATE, state=state, exit_code=code, reason=reason)
    return NodePage([end], RUNNER_STATES[state], exit_code=code)


async def test_a_node_that_ended_first_does_not_starve_a_slower_one(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen as `tcl submit` hanging after a two-node SLURM job ended: the node that ended first
    answered every pull at once, the other's poll was cut each time, the run stayed running."""
    monkeypatch.setitem(BACKENDS, "local", SlowNode1)
    Scripted.pages = {0: _ended(0), 1: _ended(0)}
    run = ctl.store.get_run("r-1")
    for _ in range(4):
        res = await pull(ctl, run, wait_s=1.0)
        if res.state.is_final:
            break
    assert ctl.store.get_run("r-1").state is RunState.SUCCEEDED
    kept = [e for e in LogCache("r-1").read() if e.kind is EventKind.STATE]
    assert sorted(e.node for e in kept) == [0, 1]


async def test_the_final_word_on_a_run_is_the_backends_not_the_kept_log(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's kept log says failed, its backend says terminated (SLURM: scancel): the run ends
    with the backend's state, asked of every node once all have ended."""
    monkeypatch.setitem(BACKENDS, "local", SlowNode1)
    stopped = dataclasses.replace(_ended(143), state=RunState.TERMINATED)
    Scripted.pages = {0: stopped, 1: stopped}
    run = ctl.store.get_run("r-1")
    for _ in range(4):
        if (await pull(ctl, run, wait_s=1.0)).state.is_final:
            break
    assert ctl.store.get_run("r-1").state is RunState.TERMINATED
