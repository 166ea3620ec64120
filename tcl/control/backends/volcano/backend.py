"""Kubernetes + Volcano hosts: one run is one Volcano Job of ``nodes`` pods, gang-scheduled.

launch: the code goes to the host's PVC (``pvccode``), the runners' spec (with their bearer
token) into a Secret, then the vcjob (``manifest``): each pod runs ``tcl-runner batch --serve``,
which reads the spec and the code, runs the job and serves its events. The control plane reaches
a pod's runner through the API server's port-forward (``kube.PortForward``), with the token read
back from the Secret (never stored here). ``minAvailable`` = replicas: every pod starts or none.

States: a Job Volcano cannot place yet is ``queued`` with the scheduler's reason; when Volcano
restarts it (``PodEvicted → RestartJob``) its ``retryCount`` grows and the run goes on as its
next attempt (the pods read the same spec; a ``tcl.jobs`` trainer resumes from its checkpoint on
the PVC). ``tcl stop`` asks each runner to stop its job, and the Job and its Secret are deleted
once every event is kept (``release``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

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
from tcl.control.backends.base import Handle as BaseHandle
from tcl.control.backends.volcano import jobtasks, manifest
from tcl.control.backends.volcano.handle import KubeTarget, VolcanoHandle
from tcl.control.backends.volcano.kube import KubeClient, PortForward
from tcl.control.backends.volcano.offers import host_offer, queue_free
from tcl.control.backends.volcano.podshell import run_session
from tcl.control.backends.volcano.podstates import PHASES, ended_pod_page, final, phase_reason
from tcl.control.backends.volcano.pvccode import pending_reason, ship_code
from tcl.control.config import VolcanoHost
from tcl.control.errors import AgentUnreachableError, ConfigError, TclError
from tcl.control.shipping import Snapshot
from tcl.control.solver import Request
from tcl.control.states import RunState
from tcl.control.transport.httpagents import HttpRunner
from tcl.runner.api import Event, JobSpec, echoed_events
from tcl.runner.batch import TOKEN_KEY
from tcl.tokenfile import new_token

SPEC_KEY = "spec.json"
OPT_IMAGE, OPT_NAMESPACE = "volcano.image", "volcano.namespace"  # tcl submit --volcano-*


class VolcanoBackend(Backend):
    kind = "volcano"
    handle_model = VolcanoHandle

    def __init__(self, inputs: Any) -> None:
        super().__init__(inputs)
        self._clients: dict[KubeTarget, KubeClient] = {}
        self._tokens: dict[str, str] = {}  # secret name -> the runners' token (memory only)
        self._forwards: dict[tuple[KubeTarget, str, int], PortForward] = {}

    # config and clients ----------------------------------------------------------------------

    def _cfg(self, host: str) -> VolcanoHost:
        cfg = self.inputs.hosts.get(host)
        if not isinstance(cfg, VolcanoHost):
            raise ConfigError(f"{host} is not a volcano host")
        return cfg

    def _target(self, host: str, namespace: str | None = None) -> KubeTarget:
        cfg = self._cfg(host)
        return KubeTarget(
            kubeconfig=cfg.kubeconfig, context=cfg.context, namespace=namespace or cfg.namespace
        )

    async def _kube(self, target: KubeTarget) -> KubeClient:
        kube = self._clients.get(target)
        if kube is None:
            kube = await asyncio.to_thread(
                KubeClient, target.kubeconfig, target.context, target.namespace
            )
            self._clients[target] = kube
        return kube

    def address(self, host: str) -> str:
        t = self._target(host)
        return f"{t.context or 'kubeconfig'}/{t.namespace}"

    # offers ----------------------------------------------------------------------------------

    async def offers(self, req: Request, hosts: Sequence[str]) -> Offers:
        out = Offers()
        for name in hosts:
            cfg = self._cfg(name)
            namespace = req.options.get(OPT_NAMESPACE) or cfg.namespace
            got = await host_offer(
                name, cfg, req, namespace, req.options.get(OPT_IMAGE), self._free
            )
            if isinstance(got, str):
                out.refused.append((name, got))
            else:
                out.offers.append(got)
        return out

    async def _free(self, host: str, cfg: VolcanoHost, namespace: str) -> tuple[int, int] | str:
        return await queue_free(await self._kube(self._target(host, namespace)), cfg)

    async def check(self, host: str) -> HostCheck:
        cfg = self._cfg(host)
        try:
            got = await self._free(host, cfg, cfg.namespace)
        except TclError as e:
            return HostCheck(False, str(e).splitlines()[0])
        if isinstance(got, str):
            return HostCheck(False, got)
        free, capacity = got
        return HostCheck(
            True,
            f"queue {cfg.queue or 'default'}: {free} of {capacity} {cfg.gpu_resource_key} free",
        )

    # launch ----------------------------------------------------------------------------------

    def _manifests(
        self, plan: Offer, job: JobSpec, image: str | None, sha256: str
    ) -> tuple[VolcanoHandle, dict[str, Any], Callable[[str], dict[str, Any]]]:
        """The handle-to-be, the vcjob and (by name) the code helper pod for ``plan``."""
        cfg = self._cfg(plan.host)
        target = self._target(plan.host, plan.params.get("namespace"))
        name = manifest.vcjob_name(job.run_id, job.attempt)
        handle = VolcanoHandle(
            host=plan.host,
            kube=target,
            job=name,
            secret=manifest.spec_secret_name(name),
            nodes=plan.node_count,
            runner_port=cfg.runner_port,
        )
        image = plan.params.get("image") or image or None
        run = manifest.VolcanoRun(
            run_id=job.run_id,
            attempt=job.attempt,
            code_sha256=sha256,
            spec_secret=handle.secret,
            name=job.name,
            env=self._job_env(plan.host, job),
            image=image,
            namespace=target.namespace,
        )
        pods = manifest.PodPlan(replicas=plan.node_count, gpus_per_pod=plan.chips_per_node)
        vcjob = manifest.vcjob_manifest(cfg, pods, run)

        def helper(pod: str) -> dict[str, Any]:
            return manifest.helper_pod_manifest(cfg, pod, image, target.namespace)

        return handle, vcjob, helper

    def _job_env(self, host: str, job: JobSpec) -> dict[str, str]:
        """A ``tcl.jobs`` job keeps its checkpoints on the PVC, and JAX its compiled programs
        (a restarted Job's pods find them there); the host's ``env:`` and the run's ``--env``
        win."""
        cfg = self._cfg(host)
        pvc = cfg.pvc_mount_path.rstrip("/")
        out = {"TCL_OUT_DIR": f"{pvc}/tcl/out", "JAX_COMPILATION_CACHE_DIR": f"{pvc}/tcl/jax"}
        return {**out, **cfg.env, **job.env}

    def dry_run(self, plan: Offer, job: JobSpec, image: str | None) -> str:
        sha256 = job.code.sha256 if job.code else "0" * 64
        handle, vcjob, _ = self._manifests(plan, job, image, sha256)
        return (
            f"# on {plan.host} ({handle.kube.context or 'kubeconfig'}, namespace "
            f"{handle.kube.namespace}): a helper pod puts the code on PVC "
            f"{self._cfg(plan.host).pvc_name}; Secret {handle.secret} holds the runners' spec "
            "(not shown); then this Volcano Job:\n" + manifest.render_yaml(vcjob)
        )

    async def launch(
        self,
        plan: Offer,
        job: JobSpec,
        snap: Snapshot,
        image: str | None,
        obs: Observer,
        on_handle: Callable[[BaseHandle], None],
    ) -> Launched:
        cfg = self._cfg(plan.host)
        handle, vcjob, helper = self._manifests(plan, job, image, snap.sha256)
        kube = await self._kube(handle.kube)
        if not await asyncio.to_thread(kube.pvc_exists, cfg.pvc_name):
            raise ConfigError(
                f"hosts.{plan.host}.pvc_name: PVC {cfg.pvc_name} not found in namespace "
                f"{handle.kube.namespace}: create it, or name one that exists"
            )
        uploaded = await ship_code(kube, helper, manifest.code_path(cfg, snap.sha256), snap, obs)
        token = new_token()
        # the runner reads the job's env (its out dir) from the spec, not its own environment
        job = job.model_copy(update={"env": self._job_env(plan.host, job)})
        spec = {**job.model_dump(mode="json"), TOKEN_KEY: token}
        labels = {"tcl.run-id": job.run_id, "tcl.attempt": str(job.attempt)}
        obs.status(f"creating Volcano job {handle.job} in {handle.kube.namespace}")
        await asyncio.to_thread(
            kube.create_secret, handle.secret, {SPEC_KEY: json.dumps(spec).encode()}, labels
        )
        self._tokens[handle.secret] = token
        try:
            await asyncio.to_thread(kube.create_vcjob, vcjob)
        except BaseException:
            with contextlib.suppress(TclError):
                await asyncio.to_thread(kube.delete_secret, handle.secret)
            raise
        on_handle(handle)
        return Launched(
            handle=handle, accelerators=[], uploaded_bytes=uploaded, state=RunState.QUEUED
        )

    # a launched run --------------------------------------------------------------------------

    async def _runner(self, h: VolcanoHandle, node: int) -> HttpRunner:
        kube = await self._kube(h.kube)
        token = self._tokens.get(h.secret)
        if token is None:
            data = await asyncio.to_thread(kube.read_secret, h.secret)
            token = str(json.loads(data[SPEC_KEY])[TOKEN_KEY])
            self._tokens[h.secret] = token
        key = (h.kube, h.pod(node), h.runner_port)
        fwd = self._forwards.get(key)
        if fwd is None:
            fwd = PortForward(kube, h.pod(node), h.runner_port)
            self._forwards[key] = fwd
        return HttpRunner(fwd.url, token, name=f"{h.host}/{h.pod(node)}")

    async def _job(self, h: VolcanoHandle) -> dict[str, Any] | None:
        kube = await self._kube(h.kube)
        return await asyncio.to_thread(kube.get_vcjob, h.job)

    async def events(self, handle: BaseHandle, node: int, after: int, wait_s: float) -> NodePage:
        assert isinstance(handle, VolcanoHandle)
        vcjob = await self._job(handle)
        if vcjob is None:
            return NodePage([], RunState.TERMINATED, message="its Volcano job was deleted")
        status = vcjob.get("status") or {}
        retry = int(status.get("retryCount") or 0)
        if retry > handle.retry:
            nxt = handle.model_copy(update={"retry": retry})
            why = f"Volcano restarted the job (retry {retry}): {phase_reason(status)}"
            return NodePage([], RunState.QUEUED, message=why, next_attempt=nxt)
        kube = await self._kube(handle.kube)
        pod = await asyncio.to_thread(kube.get_pod, handle.pod(node))
        phase = pod.status.phase if pod is not None and pod.status else None
        if phase in (None, "Pending"):
            # no reason of its own (not created yet, no condition yet): "" keeps what the run
            # says (the solver's, another pod's Unschedulable) rather than flipping it to a
            # vaguer word from one pull to the next
            why = pending_reason(pod) or phase_reason(status)
            await asyncio.sleep(min(wait_s, 1.0))
            return NodePage([], RunState.QUEUED, message=why)
        runner = await self._runner(handle, node)
        try:
            page = await runner.events(after=after, wait_s=wait_s)
        except AgentUnreachableError:
            if phase == "Running":  # its runner is not serving yet
                await asyncio.sleep(min(wait_s, 0.5))
                return NodePage([], RunState.PROVISIONING)
            if await self._evicted(handle, node):
                return await self._held([], handle, node, wait_s)
            log = await asyncio.to_thread(kube.pod_log, handle.pod(node))
            return ended_pod_page(pod, echoed_events(log, after))
        finally:
            await runner.aclose()
        state = RUNNER_STATES[page.state]
        if (
            state.is_final
            and not page.more
            and (await self._evicted(handle, node) or (page.signalled and not final(status)))
        ):
            # A signal ended the job because the pod is going (its phase may not say so yet:
            # the runner's last page comes before the kubelet marks the pod): Volcano restarts
            # the Job (its policy) or ends it, and the next look says which.
            return await self._held(page.events, handle, node, wait_s)
        return NodePage(page.events, state, page.more, page.exit_code)

    async def _held(
        self, events: list[Event], h: VolcanoHandle, node: int, wait_s: float
    ) -> NodePage:
        """An evicted pod's end, held back until its Job restarts (a next attempt) or ends."""
        if not events:
            await asyncio.sleep(min(wait_s, 0.5))
        why = f"pod {h.pod(node)} evicted; waiting for Volcano to restart the job"
        return NodePage(events, RunState.QUEUED, message=why)

    async def _evicted(self, h: VolcanoHandle, node: int) -> bool:
        """The pod was evicted (or is being deleted) while its Job still stands."""
        kube = await self._kube(h.kube)
        vcjob = await asyncio.to_thread(kube.get_vcjob, h.job)
        if vcjob is None or final(vcjob.get("status") or {}):
            return False
        if int(((vcjob.get("status") or {}).get("retryCount")) or 0) > h.retry:
            return True
        pod = await asyncio.to_thread(kube.get_pod, h.pod(node))
        if pod is None:
            return True
        return bool(pod.metadata.deletion_timestamp) or getattr(pod.status, "reason", "") == (
            "Evicted"
        )

    async def status(self, handle: BaseHandle) -> RunStatus:
        assert isinstance(handle, VolcanoHandle)
        vcjob = await self._job(handle)
        if vcjob is None:
            return RunStatus(RunState.TERMINATED, message="its Volcano job was deleted")
        status = vcjob.get("status") or {}
        phase = (status.get("state") or {}).get("phase") or "Pending"
        state = PHASES.get(phase, RunState.QUEUED)
        if state is not RunState.RUNNING:
            return RunStatus(state, message=phase_reason(status))

        async def one(node: int) -> RunState:
            runner = await self._runner(handle, node)
            try:
                health = await runner.healthcheck()
            except TclError:
                return RunState.PROVISIONING
            finally:
                await runner.aclose()
            from tcl.runner.api import RunnerState

            return RUNNER_STATES[RunnerState(health["state"])]

        states = await asyncio.gather(*(one(n) for n in range(handle.nodes)))
        return RunStatus(worst_state(list(states)))

    async def stop(self, handle: BaseHandle, grace_s: float, dump_stacks: bool = False) -> None:
        # dump_stacks: not here (the scheduler signals the job's processes, not its runner)
        """Each runner stops its job (its signal, its grace, its last events); a Job whose pods
        do not run yet is deleted at once."""
        assert isinstance(handle, VolcanoHandle)

        async def one(node: int) -> bool:
            try:
                runner = await self._runner(handle, node)
            except TclError:
                return False
            try:
                await runner.stop(grace_s)
                return True
            except TclError:
                return False
            finally:
                await runner.aclose()

        stopped = await asyncio.gather(*(one(n) for n in range(handle.nodes)))
        if not any(stopped):
            await self.release(handle, RunState.TERMINATED)

    async def release(self, handle: BaseHandle, state: RunState) -> None:
        """Delete the Job (Volcano deletes its pods) and the spec Secret."""
        assert isinstance(handle, VolcanoHandle)
        kube = await self._kube(handle.kube)
        for node in range(handle.nodes):
            fwd = self._forwards.pop((handle.kube, handle.pod(node), handle.runner_port), None)
            if fwd is not None:
                fwd.close()
        await _delete_job(kube, handle.job, handle.secret)
        self._tokens.pop(handle.secret, None)

    def ssh_endpoint(self, handle: BaseHandle, node: int) -> SshEndpoint | None:
        """A session through the API server's exec stream into the node's pod (no sshd, no
        ``kubectl``): ``tcl.control.backends.volcano.podshell``."""
        assert isinstance(handle, VolcanoHandle)
        pod = handle.pod(node)
        return SshEndpoint(
            host=pod,
            port=None,
            user=None,
            identity_file=None,
            known_hosts=None,
            proxy_jump=None,
            session=functools.partial(run_session, handle.kube, pod),
        )

    async def host_tasks(self, host: str) -> list[HostTask]:
        """tcl's Volcano jobs in the host's namespace (labelled with their run and attempt)."""
        kube = await self._kube(self._target(host))
        jobs = await asyncio.to_thread(kube.vcjobs, jobtasks.SELECTOR)
        now = time.time()
        return [t for j in jobs if (t := jobtasks.host_task(host, j, now)) is not None]

    async def end_task(self, task: HostTask) -> None:
        """Delete the job (Volcano deletes its pods) and its spec Secret."""
        kube = await self._kube(self._target(task.host))
        await _delete_job(kube, task.task_id, manifest.spec_secret_name(task.task_id))

    async def aclose(self) -> None:
        for fwd in self._forwards.values():
            fwd.close()
        self._forwards.clear()
        for kube in self._clients.values():
            await asyncio.to_thread(kube.close)
        self._clients.clear()


async def _delete_job(kube: KubeClient, job: str, secret: str) -> None:
    """The vcjob (Volcano deletes its pods) and its spec Secret."""
    await asyncio.to_thread(kube.delete_vcjob, job)
    await asyncio.to_thread(kube.delete_secret, secret)
