"""Submit at the agent seam: no_capacity at launch moves on; a failed start frees the task."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tcl.control.config import parse_config
from tcl.control.errors import (
    AgentError,
    AgentUnreachableError,
    NoCapacityError,
    NoPlacementError,
    ShippingError,
    SubmitCancelled,
)
from tcl.control.lifecycle.submit import Submission, submit
from tcl.control.service import Control
from tcl.control.states import RunState
from tcl.control.store import Store
from tcl.shim.api import (
    Accelerator,
    ExecutorKind,
    HostInfo,
    Ports,
    TaskInfo,
    TaskSpec,
    TaskStatus,
    TerminationReason,
)
from tests.unit.control.test_follow import FakeBackend, FakeRunner, use_hosts

CFG = parse_config("""
hosts:
  racy: {type: local}
  spare: {type: local}
priority: [racy, spare]
""")


class Shim:
    """Reports 2 free h100; refuses tasks with no_capacity when ``racy`` (another submit won)."""

    def __init__(self, racy: bool) -> None:
        self.racy = racy
        self.created: list[TaskSpec] = []
        self.terminated: list[tuple[str, TerminationReason]] = []
        self.removed: list[str] = []

    async def host(self) -> HostInfo:
        accs = [Accelerator(index=i, chip="h100", vendor="fake") for i in range(2)]
        return HostInfo(hostname="h", cpus=2, memory_bytes=1, accelerators=accs, executors=[])

    async def create_task(self, spec: TaskSpec) -> TaskInfo:
        if self.racy:
            raise NoCapacityError("shim: no capacity: 0 of 2 free")
        self.created.append(spec)
        return TaskInfo(
            id=spec.id,
            name=spec.name,
            status=TaskStatus.RUNNING,
            accelerators=[0, 1],
            network="host",
            ports=Ports(runner=4242),
            runner_token="t" * 43,
            executor=ExecutorKind.PROCESS,
            created_at=0,
            updated_at=0,
        )

    async def get_task(self, task_id: str) -> TaskInfo:
        raise NotImplementedError("submit reads no task back")

    async def terminate_task(
        self, task_id: str, reason: TerminationReason = TerminationReason.DONE, message: str = ""
    ) -> Any:
        self.terminated.append((task_id, reason))

    async def remove_task(self, task_id: str) -> None:
        self.removed.append(task_id)

    async def list_tasks(self) -> list[TaskInfo]:
        """What the host still holds: the tasks made and not removed."""
        if self.unlistable:
            raise AgentUnreachableError("shim racy: connection refused")
        return [
            TaskInfo(
                id=t.id,
                name=t.name,
                status=TaskStatus.TERMINATED,
                network="host",
                executor=ExecutorKind.PROCESS,
                created_at=0,
                updated_at=0,
            )
            for t in self.created
            if t.id not in self.removed
        ]

    unlistable = False

    async def aclose(self) -> None: ...


class BrokenRunner(FakeRunner):
    async def submit(self, spec: Any) -> None:
        raise AgentError("runner: spec_invalid: argv is empty")


@pytest.fixture
def ctl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Control:
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "job.py").write_text("print(1)\n")
    monkeypatch.chdir(tmp_path / "code")
    return Control(CFG, Store(f"sqlite:///{tmp_path / 'tcl.db'}"))


async def test_no_capacity_at_launch_moves_to_the_next_host(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    racy, spare = Shim(racy=True), Shim(racy=False)
    use_hosts(
        monkeypatch,
        racy=FakeBackend(FakeRunner(None), racy),  # type: ignore[arg-type]
        spare=FakeBackend(FakeRunner(None), spare),  # type: ignore[arg-type]
    )
    res = await submit(ctl, Submission(argv=["python", "job.py"], chip="h100", chips=2))
    assert res.host == "spare" and res.accelerators == [0, 1]
    assert res.skipped == [("racy", "no capacity at launch: shim: no capacity: 0 of 2 free")]
    assert spare.created[0].accelerators == 2 and spare.created[0].ssh_keys
    run = ctl.store.get_run(res.run_id)
    assert run.state is RunState.RUNNING and run.host == "spare"


async def test_a_failed_start_terminates_the_task_and_fails_the_run(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = Shim(racy=False)
    use_hosts(monkeypatch, racy=FakeBackend(BrokenRunner(None), shim))  # type: ignore[arg-type]
    with pytest.raises(AgentError, match="argv is empty"):
        await submit(ctl, Submission(argv=["x"], host="racy"))
    ((task_id, reason),) = shim.terminated
    assert task_id.endswith("-0") and reason is TerminationReason.NOT_STARTED
    # removed too: an adopter of this placement (its placer died meanwhile) finds no task, not
    # a job that ended `failed` (a sweep entry placed through a store outage ended so)
    assert shim.removed == [task_id]
    (run,) = ctl.store.list_runs()
    assert run.state is RunState.FAILED and "argv is empty" in run.message


class Notes:
    def __init__(self) -> None:
        self.notes: list[str] = []

    def status(self, text: str) -> None: ...

    def progress(self, done: int, total: int) -> None: ...

    def note(self, text: str) -> None:
        self.notes.append(text)


def _racy(monkeypatch: pytest.MonkeyPatch, runner: FakeRunner) -> None:
    use_hosts(monkeypatch, racy=FakeBackend(runner, Shim(racy=False)))  # type: ignore[arg-type]


class SpecRunner(FakeRunner):
    async def submit(self, spec: Any) -> None:
        self.spec = spec


async def test_outside_git_says_what_it_ships_and_refuses_home(
    ctl: Control, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _racy(monkeypatch, FakeRunner(None))
    obs = Notes()
    await submit(ctl, Submission(argv=["python", "job.py"], host="racy"), obs)
    code = (tmp_path / "code").resolve()
    assert obs.notes == [f"not in a git repository: shipping {code} (1 files) with .tclignore"]
    monkeypatch.setenv("HOME", str(code))
    with pytest.raises(ShippingError, match="--dir DIR"):
        await submit(ctl, Submission(argv=["x"], host="racy"))
    await submit(ctl, Submission(argv=["x"], host="racy", code_dir=code))  # explicit: shipped


async def test_the_job_starts_in_the_submit_directory(
    ctl: Control, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = SpecRunner(None)
    _racy(monkeypatch, runner)
    (tmp_path / "code" / "sub" / "deeper").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(tmp_path / "code")], check=True)
    monkeypatch.chdir(tmp_path / "code" / "sub" / "deeper")
    await submit(ctl, Submission(argv=["python", "inner.py"], host="racy"))
    assert runner.spec.cwd == "sub/deeper"
    monkeypatch.chdir(tmp_path / "code")
    await submit(ctl, Submission(argv=["python", "job.py"], host="racy"))
    assert runner.spec.cwd == ""


async def test_an_image_on_a_process_executor_host_is_warned_about(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    _racy(monkeypatch, FakeRunner(None))
    obs = Notes()
    await submit(ctl, Submission(argv=["x"], host="racy", image="ghcr.io/me/img:1"), obs)
    assert (
        "warning: --image ghcr.io/me/img:1 is ignored: racy runs jobs with the process executor, "
        "not in a container" in obs.notes
    )


async def test_a_submit_that_placed_nothing_leaves_no_run(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing fits (both hosts full): the error says why, `tcl ps` shows nothing."""
    full = Shim(racy=True)
    use_hosts(
        monkeypatch,
        racy=FakeBackend(FakeRunner(None), full),  # type: ignore[arg-type]
        spare=FakeBackend(FakeRunner(None), full),  # type: ignore[arg-type]
    )
    with pytest.raises(NoPlacementError, match="nothing fits"):
        await submit(ctl, Submission(argv=["x"], chip="h100", chips=2))
    assert ctl.store.list_runs() == []


async def test_a_down_shim_names_its_host_and_the_fix() -> None:
    from tcl.control.transport.httpagents import HttpShim

    shim = HttpShim(
        "http://127.0.0.1:9",
        "t" * 43,
        name="shim gpu1",
        unreachable_hint="run `tcl host setup gpu1`",
    )
    try:
        with pytest.raises(AgentUnreachableError) as e:
            await shim.host()
    finally:
        await shim.aclose()
    msg = str(e.value)
    assert msg.startswith("shim gpu1: cannot reach the shim at http://127.0.0.1:9")
    assert msg.endswith("; run `tcl host setup gpu1`")


async def test_a_client_its_owner_closed_meanwhile_reads_as_a_dropped_connection() -> None:
    """Before: a reset after one call's error closed the host's shared client, and another
    call on it raised httpx's "Cannot send a request, as the client has been closed" (a
    RuntimeError no caller classifies): a 480-entry sweep under load ended 21 entries `failed`
    whose runs had succeeded. Now it is unreachable for now: asked again on a new client."""
    from tcl.control.transport.httpagents import HttpRunner, HttpShim

    shim = HttpShim("http://127.0.0.1:9", "t" * 43, name="shim gpu1")
    runner = HttpRunner("http://127.0.0.1:9", "t" * 43, name="runner r-1")
    await shim.aclose()  # what a concurrent reset does
    await runner.aclose()
    with pytest.raises(AgentUnreachableError, match="reset meanwhile"):
        await shim.get_task("r-1-0")
    with pytest.raises(AgentUnreachableError, match="client was closed"):
        await runner.healthcheck()


def test_the_ssh_backend_hints_host_setup_when_its_shim_is_down() -> None:
    from tcl.control.backends.ssh import SshShimHost
    from tcl.control.config import SshHost
    from tcl.control.transport.ssh import SshPool

    b = SshShimHost("gpu1", SshHost(type="ssh", ssh="gpu1"), SshPool())
    b._token, b._shim_dir = "t" * 43, "/x"

    class _Pool:
        async def forward(self, target: object, port: int) -> int:
            return 9

    b.pool = _Pool()  # type: ignore[assignment]

    async def go() -> str:
        shim = await b.shim()
        try:
            await shim.host()
        except AgentUnreachableError as e:
            return str(e)
        finally:
            await b.aclose()
        return ""

    msg = asyncio.run(go())
    assert "gpu1" in msg and "run `tcl host setup gpu1`" in msg


class CancellingBackend(FakeBackend):
    """Ctrl-C while the code ships: the staged upload must be discarded before the error."""

    discarded = False

    async def ship_code(self, *args: Any, **kwargs: Any) -> int:
        raise asyncio.CancelledError

    async def discard_staged(self) -> None:
        self.discarded = True


async def test_ctrl_c_during_the_upload_cleans_up_and_says_so(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    shim = Shim(racy=False)
    b = CancellingBackend(FakeRunner(None), shim)  # type: ignore[arg-type]
    use_hosts(monkeypatch, racy=b)
    with pytest.raises(SubmitCancelled, match=r"^cancelled; nothing left on racy$"):
        await submit(ctl, Submission(argv=["x"], host="racy"))
    assert b.discarded and shim.terminated[0][1] is TerminationReason.NOT_STARTED
    # The host lists nothing of it: no run is left (it used to stay `terminated`, its message
    # "CancelledError"; issue 31).
    assert ctl.store.list_runs() == []
    # A host that cannot be asked whether anything is left: the run is kept for the orphan
    # sweep, and says so in words.
    shim.unlistable = True
    with pytest.raises(SubmitCancelled):
        await submit(ctl, Submission(argv=["x"], host="racy"))
    (run,) = ctl.store.list_runs()
    assert run.state is RunState.TERMINATED
    assert run.message == (
        "cancelled before its job started; racy may still hold its task until the orphan "
        "sweep ends it"
    )


class RefusingRunner(FakeRunner):
    async def submit(self, spec: Any) -> None:
        raise AgentError("runner: spec_invalid: no such working dir")


async def test_multi_node_launch_is_all_or_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node 1's runner refuses the job after node 0 started: both tasks are terminated, the
    run fails, and nothing holds accelerators; each node got its rank and the coordinator."""
    cfg = parse_config("""
clusters: {pod: {}}
hosts:
  a: {type: local, cluster: pod}
  b: {type: local, cluster: pod}
""")
    ctl = Control(cfg, Store(f"sqlite:///{tmp_path / 'tcl.db'}"))
    shim_a, shim_b = Shim(racy=False), Shim(racy=False)
    good = SpecRunner(None)
    use_hosts(
        monkeypatch,
        a=FakeBackend(good, shim_a),  # type: ignore[arg-type]
        b=FakeBackend(RefusingRunner(None), shim_b),  # type: ignore[arg-type]
    )
    with pytest.raises(AgentError, match="no such working dir"):
        await submit(ctl, Submission(argv=["x"], chip="h100", chips=4))
    assert [t for t, _ in shim_a.terminated] == [shim_a.created[0].id]
    assert [t for t, _ in shim_b.terminated] == [shim_b.created[0].id]
    assert shim_a.created[0].multinode and shim_a.created[0].accelerators == 2
    (run,) = ctl.store.list_runs()
    assert run.state is RunState.FAILED and "no such working dir" in run.message
    cluster = good.spec.cluster
    assert (cluster.node_rank, cluster.nodes) == (0, 2)
    assert cluster.coordinator is not None and cluster.coordinator.startswith("127.0.0.1:")


async def test_the_submitter_s_base_env_reaches_only_a_job_on_this_machine(
    ctl: Control, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 30: a job of a backend that runs here (``local``) starts from its submitter's
    PATH (the submit's --env still wins); elsewhere the host's own base stands. The run keeps
    it, so a retry placed by the daemon has it too."""
    from tcl.control.backends.local import LocalBackend
    from tcl.control.backends.shim import ShimBackend

    assert LocalBackend.runs_here and not ShimBackend.runs_here
    runner = SpecRunner(None)
    _racy(monkeypatch, runner)  # a shim-based backend of fakes: it runs elsewhere
    sub = Submission(
        argv=["x"],
        host="racy",
        env={"LANG": "C"},
        submitter_base={"PATH": "/home/u/bin:/usr/bin", "LANG": "C.UTF-8"},
    )
    res = await submit(ctl, sub)
    assert runner.spec.env == {"LANG": "C"}
    assert ctl.store.get_run(res.run_id).request.submitter_base == sub.submitter_base
    monkeypatch.setattr(ShimBackend, "runs_here", True)  # as the local default's
    await submit(ctl, sub)
    assert runner.spec.env == {"PATH": "/home/u/bin:/usr/bin", "LANG": "C"}
