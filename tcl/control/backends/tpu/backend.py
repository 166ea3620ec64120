"""The ``tpu`` backend: a Google Cloud TPU VM slice, created on demand, a shim on every worker.

A ``type: tpu`` host is one node of the Cloud TPU API (a slice of N workers). Its lifecycle:

- offers: the node's state from the API. READY with every worker's shim idle → use it;
  CREATING → wait for it; missing → create (after the user's confirmation: it is billed);
  PREEMPTED / TERMINATED / STOPPED / UNKNOWN → lost: delete, then create again.
- launch: create the node with a ``startup-script`` that installs the shim on each worker at
  first boot (``bootstrap.py``), wait for READY and every shim, then one task per worker through
  the shim path (:class:`ShimBackend`): all workers or none, ranks and the coordinator (worker 0)
  given to every runner, code uploaded to every worker in parallel. A node this launch created
  is deleted again when the launch fails.
- while it runs: each worker is an ``ssh`` shim host at its network endpoint. A worker that
  cannot be reached, or a job ended by the node's preemption notice, asks the API: a lost node
  makes the page ``lost`` and the control plane relaunches the run as its next attempt.
- release: the workers' tasks end; the node is kept for the next run unless ``--down``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from tcl.control.backends.base import (
    Handle,
    HostCheck,
    HostTask,
    Launched,
    NodeOffer,
    NodePage,
    Observer,
    Offer,
    Offers,
    RunStatus,
    SshEndpoint,
)
from tcl.control.backends.shim import ShimBackend
from tcl.control.backends.shimhandle import ShimNode
from tcl.control.backends.shimhost import ShimHost
from tcl.control.backends.shimoffers import free_chips, offer_text
from tcl.control.backends.ssh import SshShimHost, host_of_placement
from tcl.control.backends.tpu.accelerators import Slice, parse_accelerator_type
from tcl.control.backends.tpu.api import (
    COMING,
    GOING,
    LOST,
    USABLE,
    NodeRequest,
    TpuApi,
    TpuNode,
)
from tcl.control.backends.tpu.bootstrap import (
    WorkerBootstrap,
    render_shutdown_script,
    render_startup_script,
)
from tcl.control.backends.tpu.handle import TpuHandle
from tcl.control.clusterfs import juicefs_requirements
from tcl.control.config import SshHost, TpuHost
from tcl.control.errors import AgentError, ConfigError, TclError
from tcl.control.placement import LocalPlacement, SshPlacement
from tcl.control.shipping import Snapshot
from tcl.control.solver import Request
from tcl.control.states import RunState
from tcl.control.transport.sshconfig import public_key
from tcl.runner.api import JobSpec
from tcl.shim.api import HostInfo, TerminationReason

SHIM_POLL_S = 1.0
LABEL_HOST = "tcl-host"
# Request options (``tcl submit --tpu-version ... --down``), as the CLI names them
OPT_VERSION, OPT_SPOT, OPT_PREEMPTIBLE = "tpu.version", "tpu.spot", "tpu.preemptible"
OPT_DOWN = "down"


class TpuBackend(ShimBackend):
    kind = "tpu"
    handle_model = TpuHandle

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._apis: dict[str, TpuApi] = {}
        self._endpoints: dict[str, tuple[str, ...]] = {}  # per config host: worker addresses

    # config, API, workers ---------------------------------------------------------------

    def cfg(self, host: str) -> TpuHost:
        cfg = self.inputs.hosts.get(host)
        if not isinstance(cfg, TpuHost):
            raise self.unknown_host(host)
        return cfg

    def api(self, host: str) -> TpuApi:
        api = self._apis.get(host)
        if api is None:
            api = self._apis[host] = TpuApi(host, self.cfg(host))
        return api

    def slice(self, host: str) -> Slice:
        return parse_accelerator_type(self.cfg(host).accelerator_type)

    def node_id(self, host: str) -> str:
        """The node's name: the config's ``node_id``, else ``tcl-<host>`` made a valid id."""
        cfg = self.cfg(host)
        if cfg.node_id:
            return cfg.node_id
        slug = re.sub(r"[^a-z0-9-]+", "-", host.lower()).strip("-")
        return f"tcl-{slug}"[:61].rstrip("-")

    @staticmethod
    def worker_name(host: str, index: int) -> str:
        return f"{host}/w{index}"

    def _worker_cfg(self, host: str, address: str) -> SshHost:
        c = self.cfg(host)
        return SshHost(
            type="ssh",
            ssh=address,
            port=c.ssh_port,
            user=c.ssh_user,
            identity_file=c.identity_file,
            known_hosts=c.known_hosts,
            connect_timeout_s=c.connect_timeout_s,
            shim_port=c.shim_port,
            shim_dir=c.shim_dir,
            shim_venv=c.shim_venv or f"{c.shim_dir}/venv",
            executor=c.executor,
            python=c.python,
        )

    def _make_host(self, name: str, record: LocalPlacement | SshPlacement | None) -> ShimHost:
        host, _, index = name.rpartition("/w")
        addresses = self._endpoints.get(host, ())
        if index.isdigit() and int(index) < len(addresses):
            cfg = self._worker_cfg(host, addresses[int(index)])
            return SshShimHost(name, cfg, self.inputs.ssh_pool())
        if isinstance(record, SshPlacement):  # a node whose endpoints this process never read
            return SshShimHost(name, host_of_placement(record), self.inputs.ssh_pool())
        raise self.unknown_host(name)

    async def _set_workers(self, host: str, node: TpuNode) -> None:
        """Reach the workers at the node's endpoints now (a recreated node has new ones)."""
        if self._endpoints.get(host) == node.endpoints:
            return
        self._endpoints[host] = node.endpoints
        stale = [n for n in self._hosts if n.rpartition("/w")[0] == host]
        for n in stale:
            await self._hosts.pop(n).aclose()

    # what a node would be -----------------------------------------------------------------

    def bootstrap(self, host: str) -> WorkerBootstrap:
        c = self.cfg(host)
        try:
            return self._bootstrap(host, c)
        except ValueError as e:
            raise ConfigError(f"hosts.{host}: {e}") from None

    def _bootstrap(self, host: str, c: TpuHost) -> WorkerBootstrap:
        return WorkerBootstrap(
            shim_dir=c.shim_dir,
            shim_port=c.shim_port,
            shim_venv=c.shim_venv,
            package=c.shim_package,
            python=c.python,
            executor=c.executor,
            tpu_chip=self.slice(host).chip,
            fake_accelerators=c.fake_accelerators,
            user_startup_script=c.metadata.get("startup-script"),
            extra_requirements=tuple(juicefs_requirements(self.inputs.cluster_of(host))),
        )

    def node_request(self, host: str, options: Mapping[str, str]) -> NodeRequest:
        c = self.cfg(host)
        boot = self.bootstrap(host)
        metadata = {k: v for k, v in c.metadata.items() if k != "startup-script"}
        metadata["startup-script"] = render_startup_script(boot)
        metadata["shutdown-script"] = render_shutdown_script(boot)
        user = c.ssh_user or "root"
        with contextlib.suppress(TclError, OSError):
            # as gcloud does: the workers let this workstation's key in (GCE's guest agent)
            metadata.setdefault("ssh-keys", f"{user}:{public_key().strip()}")
        return NodeRequest(
            node_id=self.node_id(host),
            accelerator_type=c.accelerator_type,
            runtime_version=options.get(OPT_VERSION) or c.version,
            spot=_flag(options.get(OPT_SPOT), c.spot),
            preemptible=_flag(options.get(OPT_PREEMPTIBLE), c.preemptible),
            network=c.network,
            subnetwork=c.subnetwork,
            service_account=c.service_account,
            external_ips=not c.internal_ip,
            labels={**c.labels, LABEL_HOST: _label(host)},
            metadata=metadata,
        )

    def _cost_text(self, host: str, req: NodeRequest, why: str) -> str:
        sl = self.slice(host)
        pricing = "spot" if req.spot else "preemptible" if req.preemptible else "on-demand"
        return (
            f"{why}create TPU node {req.node_id} ({sl.describe()}, {pricing}, "
            f"{req.runtime_version}) in {self.cfg(host).zone}: Google Cloud bills it per hour "
            f"until it is deleted (tcl submit --down deletes it after the run)"
        )

    # offers -----------------------------------------------------------------------------

    async def offers(self, req: Request, hosts: Sequence[str]) -> Offers:
        out = Offers()
        answers = await asyncio.gather(*(self._offer(req, h) for h in hosts))
        for host, ans in zip(hosts, answers, strict=True):
            if isinstance(ans, Offer):
                out.offers.append(ans)
            else:
                out.refused.append((host, ans))
        return out

    async def _offer(self, req: Request, host: str) -> Offer | str:
        sl = self.slice(host)
        if req.chips == 0 or (req.chip is not None and req.chip != sl.chip):
            return f"{sl.describe()} (ask --chip {sl.chip} -n {sl.chips})"
        if not sl.takes(req.chips) or (req.nodes and req.nodes != sl.workers):
            return f"{sl.describe()}: a job takes the whole slice (-n {sl.chips})"
        nid = self.node_id(host)
        try:
            node = await self.api(host).get_node(nid)
        except TclError as e:
            return f"unreachable: {str(e).splitlines()[0]}"
        options = dict(req.options)
        params = {"node": nid, "down": "1" if options.get(OPT_DOWN) == "1" else ""}
        params.update({k: v for k, v in options.items() if k.startswith("tpu.")})
        offer = Offer(
            backend=self.kind,
            host=host,
            chip=sl.chip,
            chips_per_node=sl.chips_per_worker,
            nodes=tuple(NodeOffer(self.worker_name(host, i)) for i in range(sl.workers)),
            free=sl.chips,
        )
        if node is None or node.state in LOST | GOING:
            action = "create" if node is None else "recreate"
            why = "" if node is None else f"node {nid} is {node.state}: delete it and "
            request = self.node_request(host, options)
            return replace(
                offer,
                params={**params, "action": action},
                confirm=self._cost_text(host, request, why),
            )
        if node.state in COMING:
            return replace(offer, params={**params, "action": "wait"})
        await self._set_workers(host, node)
        infos = await asyncio.gather(
            *(self._probe_quiet(self.worker_name(host, i)) for i in range(len(node.endpoints)))
        )
        if any(i is None for i in infos):  # shims still being installed (first boot)
            return replace(offer, params={**params, "action": "wait"})
        busy = [
            f"w{i}: {offer_text(info)}"
            for i, info in enumerate(infos)
            if info is not None and len(free_chips(info, sl.chip)) < sl.chips_per_worker
        ]
        if busy:
            return f"node {nid} busy: {'; '.join(busy)}"
        return replace(offer, params={**params, "action": "use"})

    async def _probe_quiet(self, worker: str) -> HostInfo | None:
        try:
            return await self.probe(worker)
        except TclError:
            return None

    def dry_run(self, plan: Offer, job: JobSpec, image: str | None) -> str:
        host = plan.host
        req = self.node_request(host, plan.params)
        sl = self.slice(host)
        body = req.body()
        scripts = ("startup-script", "shutdown-script")
        shown = {
            **body,
            "metadata": {k: v for k, v in body["metadata"].items() if k not in scripts},
        }
        out = [f"# TPU node {req.node_id}: {sl.describe()} ({plan.params.get('action')})\n"]
        if plan.params.get("action") in ("create", "recreate"):
            c = self.cfg(host)
            how = "queuedResources" if c.queued_resource else "nodes"
            out.append(
                f"# POST /v2/projects/{c.project or '<adc project>'}/locations/{c.zone}/"
                f"{how}?{'queuedResourceId' if c.queued_resource else 'nodeId'}="
                f"{req.node_id}\n"
            )
        out.append(json.dumps(shown, indent=2) + "\n")
        out.append("# metadata startup-script (installs the shim on every worker at first boot):\n")
        out.append(body["metadata"]["startup-script"].rstrip("\n") + "\n")
        out.append("# metadata shutdown-script (asks running jobs to checkpoint on preemption):\n")
        out.append(body["metadata"]["shutdown-script"].rstrip("\n") + "\n")
        out.append(f"# then one task per worker ({sl.workers}):\n")
        if host in self._endpoints:
            out.append(super().dry_run(plan, job, image))
            return "".join(out)
        # no node yet: name its workers by placeholders for the task specs, then forget them
        # one word each: they go through the ssh host fields' checks (tcl.control.safefields)
        self._endpoints[host] = tuple(f"WORKER-{i}-ADDRESS" for i in range(sl.workers))
        try:
            out.append(super().dry_run(plan, job, image))
        finally:
            del self._endpoints[host]
            for n in [n for n in self._hosts if n.rpartition("/w")[0] == host]:
                del self._hosts[n]  # never connected: nothing to close
        return "".join(out)

    # launch -----------------------------------------------------------------------------

    def _handle(self, plan: Offer, nodes: list[ShimNode]) -> TpuHandle:
        return TpuHandle(
            kind="tpu",
            host=plan.host,
            node_id=plan.params["node"],
            created=plan.params.get("action") in ("create", "recreate"),
            down=plan.params.get(OPT_DOWN) == "1",
            nodes=nodes,
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
        host, action = plan.host, plan.params.get("action", "use")
        cfg, api, nid = self.cfg(host), self.api(host), plan.params["node"]
        created = action in ("create", "recreate")
        try:
            if action == "recreate":
                obs.status(f"deleting the lost node {nid}")
                await api.delete_node(nid)
                if cfg.queued_resource:
                    await api.delete_queued(nid)
            if created:
                req = self.node_request(host, plan.params)
                on_handle(self._handle(plan, []))  # before it exists: a crash still finds it
                if cfg.queued_resource:
                    obs.status(f"asking for TPU node {nid} through a queued resource")
                    await api.create_queued(req)
                    await self._wait_queued(host, nid, obs)
                else:
                    obs.status(f"creating TPU node {nid} ({cfg.accelerator_type})")
                    await api.create_node(req)
            if action == "use" and host in self._endpoints:
                # the offer read the node READY and every worker's shim idle just now
                return await super().launch(plan, job, snap, image, obs, on_handle)
            deadline = time.monotonic() + cfg.boot_timeout_s
            node = await api.wait_state(
                nid, USABLE, cfg.boot_timeout_s, lambda s: obs.status(f"node {nid}: {s}")
            )
            sl = self.slice(host)
            if len(node.endpoints) != sl.workers:
                raise AgentError(
                    f"{host}: node {nid} has {len(node.endpoints)} workers, "
                    f"{sl.accelerator_type} has {sl.workers}"
                )
            await self._set_workers(host, node)
            await self._wait_shims(host, len(node.endpoints), deadline, obs)
            return await super().launch(plan, job, snap, image, obs, on_handle)
        except BaseException:
            if created:  # nothing of a failed launch may stay billed
                with contextlib.suppress(TclError):
                    await asyncio.shield(self._delete(host, nid))
            raise

    async def _wait_queued(self, host: str, nid: str, obs: Observer) -> None:
        api, deadline = self.api(host), time.monotonic() + self.cfg(host).boot_timeout_s
        while True:
            state = await api.queued_state(nid)
            if state == "ACTIVE" or await api.get_node(nid) is not None:
                return
            if state in ("FAILED", "SUSPENDED", None):
                raise AgentError(f"{host}: queued resource {nid} is {state or 'gone'}")
            if time.monotonic() > deadline:
                raise AgentError(f"{host}: queued resource {nid} still {state}")
            obs.status(f"queued resource {nid}: {state}")
            await asyncio.sleep(SHIM_POLL_S)

    async def _wait_shims(self, host: str, workers: int, deadline: float, obs: Observer) -> None:
        """Every worker's shim answers (the startup-script installs it after the node is
        READY, as on GCP, where READY does not wait for the startup-script)."""

        async def one(i: int) -> None:
            name = self.worker_name(host, i)
            last = ""
            while True:
                try:
                    await self.probe(name)
                    return
                except TclError as e:
                    last = str(e).splitlines()[0]
                if time.monotonic() > deadline:
                    raise AgentError(
                        f"{name}: no shim answered within {self.cfg(host).boot_timeout_s:.0f} s "
                        f"of the node's creation ({last}); see {self.cfg(host).shim_dir}/"
                        "startup.log on the worker"
                    )
                h = self.host(name)
                if isinstance(h, SshShimHost):
                    h.forget_token()  # the startup-script may not have made it yet
                await asyncio.sleep(SHIM_POLL_S)

        obs.status(f"waiting for the shims on {workers} workers")
        await asyncio.gather(*(one(i) for i in range(workers)))

    async def _delete(self, host: str, nid: str) -> None:
        self._endpoints.pop(host, None)
        await self.api(host).delete_node(nid)
        if self.cfg(host).queued_resource:
            await self.api(host).delete_queued(nid)

    # a launched run ---------------------------------------------------------------------

    async def events(self, handle: Handle, node: int, after: int, wait_s: float) -> NodePage:
        assert isinstance(handle, TpuHandle)
        if not handle.nodes:
            return NodePage([], RunState.PROVISIONING)
        try:
            page = await super().events(handle, node, after, wait_s)
        except TclError:
            lost = await self._lost(handle)
            if lost is None:
                raise
            return NodePage([], RunState.TERMINATED, message=lost, lost=True)
        if page.state.is_final and page.state is not RunState.SUCCEEDED:
            lost = await self._lost(handle)
            if lost is not None:
                return replace(page, message=lost, lost=True)
        return page

    async def _lost(self, handle: TpuHandle) -> str | None:
        """Why the run's node is lost (preempted, deleted), or None while it stands. A shim
        that got the node's preemption notice counts: the API may say PREEMPTED only later."""
        try:
            node = await self.api(handle.host).get_node(handle.node_id)
        except TclError:
            return None
        if node is None:
            return f"node {handle.node_id} was deleted"
        if node.state in LOST:
            return f"node {handle.node_id} {node.state.lower()}"
        for n in handle.nodes:
            with contextlib.suppress(TclError):
                task = await self._task(n)
                if task.termination_reason is TerminationReason.PREEMPTED:
                    return f"node {handle.node_id} preempted (worker {n.host} was notified)"
        return None

    def ssh_endpoint(self, handle: Handle, node: int) -> SshEndpoint | None:
        """The task's container sshd (docker executor), else a login shell on the worker
        itself (process executor: the job runs there)."""
        assert isinstance(handle, TpuHandle)
        if not handle.nodes:
            return None
        ep = super().ssh_endpoint(handle, node)
        if ep is not None:
            return ep
        n = handle.nodes[node]
        t = self._node_host(n)
        if not isinstance(t, SshShimHost):
            return None
        c = t.target
        return SshEndpoint(
            host=c.host,
            port=c.port,
            user=c.user,
            identity_file=c.identity_file,
            known_hosts=c.known_hosts,
            proxy_jump=c.proxy_jump,
            remote_argv=("bash", "-c", _WORKER_SHELL, "tcl-ssh"),
        )

    async def status(self, handle: Handle) -> RunStatus:
        assert isinstance(handle, TpuHandle)
        if not handle.nodes:
            return RunStatus(RunState.PROVISIONING)
        return await super().status(handle)

    async def release(self, handle: Handle, state: RunState) -> None:
        assert isinstance(handle, TpuHandle)
        if handle.nodes:
            await super().release(handle, state)
        if handle.down and self.inputs.hosts.get(handle.host) is not None:
            await self._delete(handle.host, handle.node_id)

    async def check(self, host: str) -> HostCheck:
        """The node's state and every worker's shim (``tcl hosts --check``)."""
        nid = self.node_id(host)
        try:
            node = await self.api(host).get_node(nid)
        except TclError as e:
            return HostCheck(False, str(e).splitlines()[0])
        sl = self.slice(host)
        if node is None:
            return HostCheck(True, f"{sl.describe()}: node {nid} not created (created on submit)")
        if node.state not in USABLE:
            return HostCheck(True, f"{sl.describe()}: node {nid} {node.state}")
        await self._set_workers(host, node)
        parts = []
        for i in range(len(node.endpoints)):
            w = self.worker_name(host, i)
            try:
                parts.append(f"w{i} {offer_text(await self.probe(w))}")
            except TclError as e:
                parts.append(f"w{i} no shim ({str(e).splitlines()[0]})")
        return HostCheck(True, f"node {nid} READY: " + "; ".join(parts))

    async def host_tasks(self, host: str) -> list[HostTask]:
        """The tasks on every worker of the host's node (none while it is not READY: a node
        booting, lost or deleted holds no task another run waits for)."""
        node = await self.api(host).get_node(self.node_id(host))
        if node is None or node.state not in USABLE:
            return []
        await self._set_workers(host, node)
        workers = [self.worker_name(host, i) for i in range(len(node.endpoints))]
        found = await asyncio.gather(*(ShimBackend.host_tasks(self, w) for w in workers))
        return [t for tasks in found for t in tasks]

    def address(self, host: str) -> str:
        c = self.cfg(host)
        return f"{c.project or '<adc project>'}/{c.zone}/{self.node_id(host)}"

    async def teardown(self, host: str) -> str:
        """Delete the host's node (``tcl hosts down``)."""
        nid = self.node_id(host)
        await self._delete(host, nid)
        return f"deleted TPU node {nid}"


# `tcl ssh RUN --node N [-- CMD]` on a worker: a login shell, or CMD in one
_WORKER_SHELL = '[ "${1-}" = -- ] && shift; [ "$#" -gt 0 ] && exec bash -lc "$*"; exec bash -l'


def _flag(option: str | None, default: bool) -> bool:
    return default if option in (None, "") else option == "true"


def _label(text: str) -> str:
    """A GCE label value: lower case letters, digits, - and _, at most 63."""
    return re.sub(r"[^a-z0-9_-]+", "-", text.lower())[:63]
