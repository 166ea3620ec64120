"""The shim-based backend: a shim per host places tasks, a runner per task runs the job.

``local`` and ``ssh`` extend it with how they reach one host (:class:`ShimHost`); a TPU pod's
workers will too. A multi-node run is one task per node, on hosts of one ``cluster``, each
runner told its rank and the coordinator (node 0's address).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import functools
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from tcl.control.backends.base import (
    RUNNER_STATES,
    Backend,
    HostCheck,
    HostTask,
    Launched,
    NodePage,
    Observer,
    Offer,
    Offers,
    RunStatus,
    SshEndpoint,
    worst_state,
)
from tcl.control.backends.base import (
    Handle as BaseHandle,
)
from tcl.control.backends.keptrunners import KeptRunners
from tcl.control.backends.shimhandle import ShimHandle, ShimNode
from tcl.control.backends.shimhost import ShimHost
from tcl.control.backends.shimlaunch import all_or_raise, task_ended, wait_runner, wait_task
from tcl.control.backends.shimoffers import offer_text, shim_offers
from tcl.control.backends.shimtasks import host_task, task_ids
from tcl.control.clusterfs import cluster_fs, out_dir_env
from tcl.control.errors import (
    AgentError,
    AgentUnreachableError,
    TclError,
    UnknownHostError,
)
from tcl.control.shipping import Snapshot
from tcl.control.solver import Request
from tcl.control.states import RunState
from tcl.control.transport.agents import RunnerApi
from tcl.control.transport.sshconfig import public_key
from tcl.runner.api import ClusterInfo, JobSpec, RunnerState
from tcl.runner.nodeenv import COORDINATOR_PORT_BASE, COORDINATOR_PORT_SPAN
from tcl.shim.api import (
    ExecutorKind,
    HostInfo,
    TaskInfo,
    TaskSpec,
    TaskStatus,
    TerminationReason,
)

PROBE_TIMEOUT_S = 30.0

_OUTCOME = {
    TerminationReason.DONE: RunState.SUCCEEDED,
    TerminationReason.STOPPED_BY_USER: RunState.TERMINATED,
    TerminationReason.PREEMPTED: RunState.TERMINATED,  # stopped by the host going away
    TerminationReason.NOT_STARTED: RunState.TERMINATED,  # a placement undone
}
_REASON = {
    RunState.SUCCEEDED: TerminationReason.DONE,
    RunState.FAILED: TerminationReason.FAILED,
    RunState.TERMINATED: TerminationReason.STOPPED_BY_USER,
}


class ShimBackend(Backend):
    handle_model: ClassVar[type[BaseHandle]] = ShimHandle
    interactive = True  # every shim's runner serves its API (the forward, code sync)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._hosts: dict[str, ShimHost] = {}
        self._kept_runners = KeptRunners()  # their event pulls' clients, between pulls

    # hosts --------------------------------------------------------------------------------

    @abc.abstractmethod
    def _make_host(self, name: str, record: Any) -> ShimHost:
        """How to reach host ``name``: from the config, else from the placement record."""

    def host(self, name: str, record: Any = None) -> ShimHost:
        h = self._hosts.get(name)
        if h is None:
            h = self._hosts[name] = self._make_host(name, record)
        return h

    def unknown_host(self, name: str) -> UnknownHostError:
        return UnknownHostError(
            f"host {name!r} is not in the config (see `tcl hosts`) and the run kept no record "
            "of how to reach it"
        )

    def _node_host(self, node: ShimNode) -> ShimHost:
        return self.host(node.host, node.placement)

    def load_handle(self, raw: Any) -> BaseHandle:
        data = dict(raw)
        data.setdefault("kind", self.kind)
        return self.handle_model.model_validate(data)

    async def probe(self, name: str) -> HostInfo:
        """What the host's shim reports now (``GET /api/host``)."""
        h = self.host(name)
        try:
            shim = await asyncio.wait_for(h.shim(), PROBE_TIMEOUT_S)
            return await asyncio.wait_for(shim.host(), PROBE_TIMEOUT_S)
        except TimeoutError:
            raise AgentError(f"{name}: no answer within {PROBE_TIMEOUT_S:.0f} s") from None

    async def check(self, host: str) -> HostCheck:
        try:
            info = await self.probe(host)
        except TclError as e:
            return HostCheck(False, str(e).splitlines()[0])
        detail = offer_text(info)
        fs = cluster_fs(self.inputs.cluster_of(host))
        if fs is not None:
            detail += f"; {await self._mount_health(host, fs.mount_point)}"
        return HostCheck(True, detail, info)

    async def _mount_health(self, host: str, mount_point: str) -> str:
        """What the host's shim says of its cluster's filesystem (its health report)."""
        try:
            health = await (await self.host(host).shim()).healthcheck()
        except TclError as e:
            return f"{mount_point}: health unknown ({str(e).splitlines()[0]})"
        for m in health.get("mounts", []):
            if m.get("mount_point") == mount_point:
                if m.get("mounted"):
                    return f"{mount_point} mounted ({m.get('tasks', 0)} tasks)"
                return f"{mount_point} NOT answering: {m.get('error', '')}"
        return f"{mount_point} not mounted (its first task mounts it)"

    # offers -------------------------------------------------------------------------------

    async def offers(self, req: Request, hosts: Sequence[str]) -> Offers:
        async def one(name: str) -> HostInfo | str:
            try:
                return await self.probe(name)
            except TclError as e:
                return f"unreachable: {e}"

        infos = dict(zip(hosts, await asyncio.gather(*(one(n) for n in hosts)), strict=True))
        clusters = {n: getattr(self.inputs.hosts.get(n), "cluster", None) for n in hosts}
        return shim_offers(self.kind, req, infos, clusters)

    # launch -------------------------------------------------------------------------------

    async def launch(
        self,
        plan: Offer,
        job: JobSpec,
        snap: Snapshot,
        image: str | None,
        obs: Observer,
        on_handle: Callable[[BaseHandle], None],
    ) -> Launched:
        hosts = [self.host(n.host) for n in plan.nodes]
        multi = len(hosts) > 1
        base_id = f"{job.run_id}-{job.attempt}"
        ids = task_ids(job.run_id, job.attempt, len(hosts))
        specs = [
            self._task_spec(h, job, image, task_id, plan, multi)
            for h, task_id in zip(hosts, ids, strict=True)
        ]
        for h in hosts:
            if image and h.executor is not ExecutorKind.DOCKER:
                obs.note(
                    f"warning: --image {image} is ignored: {h.name} runs jobs with the "
                    f"{h.executor.value} executor, not in a container"
                )
        nodes: list[ShimNode | None] = [None] * len(hosts)
        tasks: list[TaskInfo | None] = [None] * len(hosts)

        def record() -> None:
            made = [n for n in nodes if n is not None]
            if made:
                on_handle(self._handle(plan, made))

        # Ahead of any task, the names they will have: a placer killed while a create is in
        # flight leaves what to look for (adoption asks the host), not a task holding chips
        # that no attempt names.
        planned = [
            ShimNode(host=h.name, placement=h.placement(), task_id=s.id)
            for h, s in zip(hosts, specs, strict=True)
        ]
        on_handle(self._handle(plan, planned).model_copy(update={"made": False}))

        async def create(i: int) -> None:
            shim = await hosts[i].shim()
            tasks[i] = await shim.create_task(specs[i])
            nodes[i] = ShimNode(
                host=hosts[i].name, placement=hosts[i].placement(), task_id=specs[i].id
            )
            record()
            hosts[i].prestage_code(snap, obs.progress)

        try:
            obs.status(f"launching on {plan.host}")
            await all_or_raise([create(i) for i in range(len(hosts))])
            started = await all_or_raise(
                [wait_task(h, t, obs) for h, t in zip(hosts, tasks, strict=True) if t]
            )
            for i, t in enumerate(started):
                if t.ports.runner is None or not t.runner_token:
                    raise AgentError(
                        f"task {t.id} reports no runner port or token (upgrade the "
                        f"shim on {hosts[i].name}: tcl host setup)"
                    )
                nodes[i] = ShimNode(
                    host=hosts[i].name,
                    placement=hosts[i].placement(),
                    task_id=t.id,
                    runner_port=t.ports.runner,
                    ssh_port=t.ports.ssh,
                    accelerators=list(t.accelerators),
                )
            record()
            coordinator = None
            if multi:
                port = COORDINATOR_PORT_BASE + zlib.crc32(base_id.encode()) % COORDINATOR_PORT_SPAN
                coordinator = f"{hosts[0].peer_address()}:{port}"
            sent = await all_or_raise(
                [
                    self._start_job(
                        hosts[i],
                        t,
                        job.model_copy(
                            update={
                                "cluster": ClusterInfo(
                                    node_rank=i, nodes=len(hosts), coordinator=coordinator
                                )
                            }
                        ),
                        snap,
                        obs,
                    )
                    for i, t in enumerate(started)
                ]
            )
        except BaseException:
            # Ctrl-C or a failure after a task exists: never leave one holding accelerators,
            # nor a partial upload on a host
            await asyncio.shield(self._undo(hosts, [s.id for s in specs]))
            raise
        return Launched(
            handle=self._handle(plan, [n for n in nodes if n]),
            accelerators=[list(t.accelerators) for t in started],
            uploaded_bytes=sum(sent),
            ssh=started[0].ports.ssh is not None,
        )

    def _handle(self, plan: Offer, nodes: list[ShimNode]) -> ShimHandle:
        """The handle of a launch on ``plan`` with ``nodes`` placed so far."""
        return ShimHandle(kind=self.kind, nodes=nodes)

    def dry_run(self, plan: Offer, job: JobSpec, image: str | None) -> str:
        hosts = [self.host(n.host) for n in plan.nodes]
        multi = len(hosts) > 1
        ids = task_ids(job.run_id, job.attempt, len(hosts))
        out = []
        for i, h in enumerate(hosts):
            spec = self._task_spec(h, job, image, ids[i], plan, multi)
            node_job = job.model_copy(
                update={
                    "env": self._job_env(h.name, job),
                    "secrets": dict.fromkeys(job.secrets, "***"),
                    "cluster": ClusterInfo(
                        node_rank=i,
                        nodes=len(hosts),
                        coordinator=f"{hosts[0].name}:<port>" if multi else None,
                    ),
                }
            )
            out.append(f"# node {i}: POST /api/tasks on the shim of {h.name}\n")
            if spec.cluster_fs is not None and spec.cluster_fs.meta_password:
                masked = spec.cluster_fs.model_copy(update={"meta_password": "***"})
                spec = spec.model_copy(update={"cluster_fs": masked})
            out.append(spec.model_dump_json(indent=2, exclude={"ssh_keys"}) + "\n")
            out.append(f"# node {i}: POST /api/submit to its runner\n")
            out.append(node_job.model_dump_json(indent=2, exclude_none=True) + "\n")
        return "".join(out)

    def _job_env(self, host: str, job: JobSpec) -> dict[str, str]:
        """The job's env on ``host``: its cluster's out dir, then the host's ``env:``, then the
        job's own (each wins over the one before)."""
        cfg = self.inputs.hosts.get(host)
        cluster = out_dir_env(self.inputs.cluster_of(host))
        return {**cluster, **getattr(cfg, "env", {}), **job.env}

    def _task_spec(
        self,
        host: ShimHost,
        job: JobSpec,
        image: str | None,
        task_id: str,
        plan: Offer,
        multi: bool,
    ) -> TaskSpec:
        cfg = self.inputs.hosts.get(host.name)
        image = image or getattr(cfg, "image", None) or ""
        if host.executor is ExecutorKind.DOCKER and not image:
            raise TclError(
                f"host {host.name} runs jobs in docker: set `image:` for it in the config "
                "or pass --image (an image with tcl-runner, see Dockerfile.runner)"
            )
        return TaskSpec(
            id=task_id,
            name=job.name or job.run_id,
            image=image,
            executor=host.executor,
            accelerators=plan.chips_per_node,
            ssh_keys=[public_key()],
            code_sha256=job.code.sha256 if job.code else None,
            multinode=multi,
            cluster_fs=cluster_fs(self.inputs.cluster_of(host.name)),
        )

    async def _undo(self, hosts: list[ShimHost], task_ids: list[str]) -> None:
        """Terminate and remove every task this launch may have made, by its id: a create
        cancelled in flight (another node failed first) may have reached its shim with no
        answer back."""

        async def one(h: ShimHost, task_id: str) -> None:
            with contextlib.suppress(TclError):
                shim = await h.shim()
                # `not_started`, and removed: whoever adopts the placement later (its placer
                # died, or the store failed mid-launch) finds no task or one that never
                # started, a placement undone; never a job that ended `failed`
                await shim.terminate_task(
                    task_id, TerminationReason.NOT_STARTED, "submit did not finish"
                )
                await shim.remove_task(task_id)
            await h.discard_staged()

        await asyncio.gather(*(one(h, t) for h, t in zip(hosts, task_ids, strict=True)))

    async def _start_job(
        self, host: ShimHost, task: TaskInfo, job: JobSpec, snap: Snapshot, obs: Observer
    ) -> int:
        """Spec, code, run; return how many code bytes crossed the network."""
        assert task.ports.runner is not None and task.runner_token
        job = job.model_copy(update={"env": self._job_env(host.name, job)})
        runner = await host.runner(task.ports.runner, task.runner_token, job.run_id)
        try:
            obs.status("waiting for the runner")
            await wait_runner(runner, functools.partial(task_ended, host, task.id))
            obs.status("handing the job to the runner")
            # one request when the host's code cache has the tree (every sweep entry after
            # the first, every re-submit): submit, the tree, run
            state = await runner.start(job)
            if state is not None and state is not RunnerState.WAITING_CODE:
                await host.code_cached(snap, obs.progress)
                return 0
            if state is None:  # a runner older than that request
                await runner.submit(job)
            obs.status(f"shipping code ({snap.files} files)")
            sent = await host.ship_code(
                snap,
                task.ports.runner,
                task.runner_token,
                runner,
                obs.progress,
                cache_checked=state is not None,
            )
            obs.status("starting the job")
            await runner.run()
            return sent
        finally:
            await runner.aclose()

    # a launched run -----------------------------------------------------------------------

    async def _task(self, node: ShimNode) -> TaskInfo:
        return await (await self._node_host(node).shim()).get_task(node.task_id)

    async def _runner(self, node: ShimNode) -> RunnerApi | TaskInfo:
        """A client for the node's runner, or the task when the host removed its runner (its
        port and bearer token come from the shim: the token is never stored on this side)."""
        task = await self._task(node)
        if task.ports.runner is None or not task.runner_token:
            if task.status is TaskStatus.TERMINATED:
                return task
            raise AgentError(f"task {node.task_id} has no runner now ({task.status})")
        return await self._node_host(node).runner(
            task.ports.runner, task.runner_token, node.task_id
        )

    async def runner(self, handle: BaseHandle, node: int) -> RunnerApi:
        assert isinstance(handle, ShimHandle)
        runner = await self._runner(handle.nodes[node])
        if isinstance(runner, TaskInfo):
            raise TclError(f"task {runner.id} has ended: its runner is gone")
        return runner

    async def events(self, handle: BaseHandle, node: int, after: int, wait_s: float) -> NodePage:
        assert isinstance(handle, ShimHandle)
        n = handle.nodes[node]
        extra = None  # a client another pull kept first, meanwhile: this one is closed after
        if self._kept_runners.get(n.task_id) is None:
            runner = await self._runner(n)
            if isinstance(runner, TaskInfo):
                return _outcome_page(runner)
            extra = self._kept_runners.keep(n.task_id, runner)
        try:
            async with self._kept_runners.using(n.task_id) as kept:
                page = await kept.events(after=after, wait_s=wait_s)
        except AgentUnreachableError:
            # A runner that does not answer while the shim says its task ended (its process
            # died, the task vanished): the shim's outcome is the node's.
            await self._kept_runners.drop(n.task_id)
            task = await self._task(n)
            if task.status is not TaskStatus.TERMINATED:
                raise
            return _outcome_page(task)
        finally:
            if extra is not None:
                await extra.aclose()
        state = RUNNER_STATES[page.state]
        if state.is_final and not page.more:
            await self._kept_runners.drop(n.task_id)  # it has nothing more to say
        preempted = False
        if state is RunState.TERMINATED and not page.more:
            # stopped by whom? the shim knows (one call, at the run's end only)
            reason = (await self._task(n)).termination_reason
            preempted = reason is TerminationReason.PREEMPTED
        return NodePage(page.events, state, page.more, page.exit_code, preempted=preempted)

    async def status(self, handle: BaseHandle) -> RunStatus:
        assert isinstance(handle, ShimHandle)

        async def one(n: ShimNode) -> tuple[RunState, bool]:
            """The node's state, and whether its job never started."""
            runner = await self._runner(n)
            if isinstance(runner, TaskInfo):
                return _ended(runner)
            try:
                health = await runner.healthcheck()
            except AgentUnreachableError:
                task = await self._task(n)  # its runner died: the shim's outcome, if it ended
                if task.status is not TaskStatus.TERMINATED:
                    raise
                return _ended(task)
            finally:
                await runner.aclose()
            state = RUNNER_STATES[RunnerState(health["state"])]
            return state, state is RunState.TERMINATED and health.get("started") is False

        nodes = await asyncio.gather(*(one(n) for n in handle.nodes))
        state = worst_state([s for s, _ in nodes])
        return RunStatus(state, never_started=all(never for _, never in nodes))

    async def stop(self, handle: BaseHandle, grace_s: float, dump_stacks: bool = False) -> None:
        assert isinstance(handle, ShimHandle)

        async def one(n: ShimNode) -> None:
            try:
                runner = await self._runner(n)
            except AgentError:
                return  # gone already: release terminates the task
            if isinstance(runner, TaskInfo):
                return
            try:
                await runner.stop(grace_s, dump_stacks)
            except AgentError:
                pass
            finally:
                await runner.aclose()

        await asyncio.gather(*(one(n) for n in handle.nodes))

    async def release(self, handle: BaseHandle, state: RunState) -> None:
        assert isinstance(handle, ShimHandle)
        reason = _REASON.get(state, TerminationReason.DONE)
        for n in handle.nodes:
            for again in (False, True):
                try:
                    shim = await self._node_host(n).shim()
                    await shim.terminate_task(n.task_id, reason, f"run {state.value}")
                    await shim.remove_task(n.task_id)
                    break
                except AgentUnreachableError:
                    # a dropped connection, or a shim that died while its runner went on (the
                    # events came on a kept connection): once more on a new one (a local shim
                    # is started anew)
                    if again:
                        break
                    await self._node_host(n).reset()
                except TclError:
                    break  # the host is gone or the task already is: nothing to free

    async def host_tasks(self, host: str) -> list[HostTask]:
        shim = await self.host(host).running_shim()
        if shim is None:
            return []  # a shim that is not running holds no tasks to sweep
        infos = await shim.list_tasks()
        now = time.time()
        return [t for info in infos if (t := host_task(host, info, now)) is not None]

    async def end_task(self, task: HostTask) -> None:
        shim = await self.host(task.host).shim()
        await shim.terminate_task(task.task_id, TerminationReason.FAILED, "no run names it")
        await shim.remove_task(task.task_id)

    def ssh_endpoint(self, handle: BaseHandle, node: int) -> SshEndpoint | None:
        assert isinstance(handle, ShimHandle)
        n = handle.nodes[node]
        if n.ssh_port is None:
            return self._node_host(n).shell_endpoint(n.task_id)
        return self._node_host(n).ssh_endpoint(n.ssh_port)

    def address(self, host: str) -> str:
        return "this machine" if self.kind == "local" else super().address(host)

    async def reset(self, handle: BaseHandle | None = None) -> None:
        hosts = (
            [self._node_host(n) for n in handle.nodes]
            if isinstance(handle, ShimHandle)
            else list(self._hosts.values())
        )
        for h in hosts:
            await h.reset()
        tasks = [n.task_id for n in handle.nodes] if isinstance(handle, ShimHandle) else None
        for task_id in tasks if tasks is not None else self._kept_runners.task_ids():
            await self._kept_runners.drop(task_id)

    async def aclose(self) -> None:
        await self._kept_runners.aclose()
        for h in self._hosts.values():
            await h.aclose()


def _ended(task: TaskInfo) -> tuple[RunState, bool]:
    """A terminated task's state, and whether its job never started."""
    return _outcome_page(task).state, task.termination_reason is TerminationReason.NOT_STARTED


def _outcome_page(task: TaskInfo) -> NodePage:
    """The node's end as the shim kept it, for a runner (and the logs it had) already gone."""
    state = _OUTCOME.get(task.termination_reason or TerminationReason.FAILED, RunState.FAILED)
    msg = f"{task.message}; logs not fetched before the host's retention are gone"
    preempted = task.termination_reason is TerminationReason.PREEMPTED
    return NodePage([], state, False, task.exit_code, msg, preempted=preempted)
