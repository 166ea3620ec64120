"""The ``slurm`` backend: a run is one batch job; ``srun`` starts ``tcl-runner batch`` per node.

Everything goes through one SSH connection to the login node (the pool's): ``sinfo`` for offers
(one command per solve), uploads to the cluster's shared ``work`` dir, ``sbatch``, and small
``python -c`` scripts (:mod:`.remote`) that read each node's event log and ``status.json`` there
together with the job's ``squeue`` row. The job's nodes are never reached directly.
"""

from __future__ import annotations

import asyncio
import json
import logging
import posixpath
from collections.abc import Callable, Sequence
from typing import Any

from tcl.control.backends.base import (
    RUNNER_STATES,
    Backend,
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
    worst_state,
)
from tcl.control.backends.base import Handle as BaseHandle
from tcl.control.backends.slurm import parse, remote, session
from tcl.control.backends.slurm.handle import SlurmHandle, SlurmLogin
from tcl.control.backends.slurm.jobnames import job_name, read_job_name
from tcl.control.backends.slurm.script import BatchScript, render
from tcl.control.backends.slurm.venv import IMAGE_JOB_TCL_PATH, ensure_runner, runner_program
from tcl.control.clusterfs import JUICEFS_REQUIREMENT, cluster_fs, out_dir_env
from tcl.control.config import DEFAULT_RUN_DIR_RETENTION_S, SlurmHost
from tcl.control.errors import AgentError, ConfigError, TclError
from tcl.control.shipping import Snapshot
from tcl.control.solver import Request
from tcl.control.states import RunState
from tcl.control.transport.agents import RunnerApi
from tcl.control.transport.httpagents import HttpRunner
from tcl.control.transport.ssh import SshTarget
from tcl.runner.api import Event, JobSpec, RunnerState
from tcl.runner.batch import CLUSTER_FS_KEY, PORT_FILE, TOKEN_KEY
from tcl.runner.jobenv import JOB_TCL_PATH_VAR
from tcl.shim.api import ClusterFs

log = logging.getLogger(__name__)
PAGE_LIMIT = 5000


class SlurmBackend(Backend):
    kind = "slurm"
    handle_model = SlurmHandle
    interactive = True  # a session's runners serve their API, reached through the login node

    # config --------------------------------------------------------------------------------

    def _cfg(self, name: str) -> SlurmHost:
        cfg = self.inputs.hosts.get(name)
        if not isinstance(cfg, SlurmHost):
            raise TclError(f"host {name!r} is not a slurm host in the config")
        return cfg

    def _work(self, name: str, cfg: SlurmHost) -> str:
        cluster = self.inputs.clusters.get(cfg.cluster or "")
        if cfg.cluster is None or cluster is None or not cluster.work:
            key = f"clusters.{cfg.cluster}.work" if cfg.cluster else f"hosts.{name}.cluster"
            raise ConfigError(
                f"{key}: a slurm host needs a cluster whose `work` is a directory on the "
                "cluster's shared filesystem (runs, code and tcl's runner venv go there)"
            )
        return cluster.work.rstrip("/")

    def _cluster_fs(self, name: str, cfg: SlurmHost) -> ClusterFs | None:
        """What each node mounts before the job starts (the cluster's ``mount:``), or None."""
        fs = cluster_fs(self.inputs.cluster_of(name))
        if fs is not None and cfg.container != "none":
            raise ConfigError(
                f"hosts.{name}: clusters.{cfg.cluster}.mount needs `container: none`: tcl's "
                "runner mounts the cluster's root on each node, and in a container it cannot; "
                "mount it on the nodes yourself and drop `mount:`"
            )
        return fs

    def _target(self, name: str, login: SlurmLogin | None = None) -> SshTarget:
        cfg = self.inputs.hosts.get(name)
        if isinstance(cfg, SlurmHost):
            return SshTarget.from_config(name, cfg)
        if login is not None:  # a host renamed or removed since the run was placed
            return SshTarget.from_config(name, login.host_config())
        raise TclError(f"host {name!r} is not in the config and the run kept no record of it")

    def _handle_target(self, h: SlurmHandle) -> SshTarget:
        return self._target(h.host, h.login)

    # offers --------------------------------------------------------------------------------

    async def _sinfo(self, name: str) -> list[parse.NodeRow]:
        res = await self.inputs.ssh_pool().run(self._target(name), parse.SINFO_ARGV)
        return parse.parse_sinfo(res.stdout)

    async def offers(self, req: Request, hosts: Sequence[str]) -> Offers:
        async def one(name: str) -> list[parse.NodeRow] | str:
            try:
                return await self._sinfo(name)
            except TclError as e:
                return f"unreachable: {e}"

        answers = await asyncio.gather(*(one(n) for n in hosts))
        out = Offers()
        for name, rows in zip(hosts, answers, strict=True):
            if isinstance(rows, str):
                out.refused.append((name, rows))
                continue
            cfg = self._cfg(name)
            placed = parse.place(
                rows,
                req.chip,
                req.chips,
                req.nodes,
                dict(self.inputs.gres_mapping),
                [p.name for p in _ordered(cfg)],
                list(cfg.exclude),
            )
            if isinstance(placed, str):
                out.refused.append((name, placed))
                continue
            out.offers.append(
                Offer(
                    backend=self.kind,
                    host=name,
                    nodes=tuple(NodeOffer(name) for _ in range(placed.nodes)),
                    chip=placed.chip if req.chips else None,
                    chips_per_node=placed.chips_per_node,
                    starts_now=placed.starts_now,
                    queue_reason=placed.reason,
                    free=placed.free,
                    params={"partition": placed.partition},
                )
            )
        return out

    # launch --------------------------------------------------------------------------------

    def _script(
        self,
        plan: Offer,
        job: JobSpec,
        cfg: SlurmHost,
        work: str,
        run_dir: str,
        code: str | None,
        runner: str,
    ) -> BatchScript:
        gres = None
        if plan.chips_per_node and plan.chip:
            kind = self.inputs.gres_mapping.get(plan.chip, f"gpu:{plan.chip}")
            gres = f"{kind}:{plan.chips_per_node}"
        return BatchScript(
            job_name=job_name(job.run_id, job.attempt),
            nodes=plan.node_count,
            partition=plan.params.get("partition"),
            gres=gres,
            run_dir=run_dir,
            spec=f"{run_dir}/spec.json",
            code=code,
            runner=[runner],
            time_s=job.max_duration_s or cfg.time_limit_s,
            account=cfg.account,
            qos=cfg.qos,
            mem=cfg.mem,
            exclude=tuple(cfg.exclude),
            signal_before_s=cfg.signal_before_s,
            container=cfg.container,
            container_image=cfg.container_image,
            work=work,
            extra_env=(
                () if cfg.container == "none" else ((JOB_TCL_PATH_VAR, IMAGE_JOB_TCL_PATH),)
            ),
            serve=session.SERVE_ADDR if job.session is not None else None,
        )

    def dry_run(self, plan: Offer, job: JobSpec, image: str | None) -> str:
        cfg = self._cfg(plan.host)
        work = self._work(plan.host, cfg)
        run_dir = f"{work}/tcl/runs/{job.run_id}/{job.attempt}"
        code = f"{work}/tcl/code/{job.code.sha256}.tar.gz" if job.code else None
        fs = self._cluster_fs(plan.host, cfg)
        script = self._script(plan, job, cfg, work, run_dir, code, runner_program(cfg, work))
        mount = (
            ""
            if fs is None
            else (
                f"# each node mounts {fs.meta_url} at {fs.mount_point} (JuiceFS) before the job\n"
            )
        )
        return (
            f"# sbatch on {plan.host} ({cfg.ssh}); the spec goes to {run_dir}/spec.json "
            "(mode 0600, not shown)\n" + mount + render(script)
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
        name = plan.host
        cfg = self._cfg(name)
        work = self._work(name, cfg)
        if image:
            obs.note(f"warning: --image {image} is ignored on {name}: set container_image")
        pool = self.inputs.ssh_pool()
        target = self._target(name)
        fs = self._cluster_fs(name, cfg)
        run_dir = f"{work}/tcl/runs/{job.run_id}/{job.attempt}"
        obs.status(f"preparing tcl's runner and shipping code ({snap.files} files) to {name}")
        code = f"{work}/tcl/code/{snap.sha256}.tar.gz" if job.code is not None else None

        async def ship() -> int:
            if code is None or not await pool.ensure_file(target, snap.tarball, code, obs.progress):
                return 0
            return snap.size

        # both are a round trip when there is nothing to do: at once, not one after the other
        juicefs = JUICEFS_REQUIREMENT if fs is not None else None
        runner, uploaded = await asyncio.gather(
            ensure_runner(pool, target, cfg, work, juicefs), ship()
        )
        out_dir = out_dir_env(self.inputs.cluster_of(name))
        job = job.model_copy(update={"env": {**out_dir, **cfg.env, **job.env}})
        text = render(self._script(plan, job, cfg, work, run_dir, code, runner))
        obs.status(f"sbatch on {name}")
        # one round trip: the spec (secrets, the mount's password, a session's token; one JSON
        # line) over stdin into a 0600 file, then the script, then sbatch
        token = session.new_token() if job.session is not None else None
        spec = spec_line(job, fs, token)
        res = await pool.run(target, ["sh", "-c", _SUBMIT, "sh", run_dir], input=f"{spec}\n{text}")
        job_id = res.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise AgentError(f"{name}: sbatch answered {res.stdout.strip()!r}")
        handle = SlurmHandle(
            host=name,
            login=SlurmLogin.of(cfg),
            job_id=job_id,
            run_dir=run_dir,
            nodes=plan.node_count,
        )
        on_handle(handle)
        return Launched(
            handle=handle, accelerators=[], uploaded_bytes=uploaded, ssh=True, state=RunState.QUEUED
        )

    # a launched run ------------------------------------------------------------------------

    async def runner(self, handle: BaseHandle, node: int) -> RunnerApi:
        """Node ``node``'s runner API (a session's), through the login node: one round trip
        reads its token, port and address, then the pool forwards a local port there."""
        assert isinstance(handle, SlurmHandle)
        pool, target = self.inputs.ssh_pool(), self._handle_target(handle)
        argv = [handle.login.python, "-c", session.RUNNER_PY, handle.run_dir]
        argv += [handle.state_dir(node), handle.job_id, TOKEN_KEY, PORT_FILE]
        res = await pool.run(target, argv, timeout_s=60)
        token, port, addr = session.parse_answer(res.stdout, handle.host)
        local = await pool.forward(target, port, remote_host=addr)
        return HttpRunner(f"http://127.0.0.1:{local}", token, f"runner {handle.job_id}")

    async def events(self, handle: BaseHandle, node: int, after: int, wait_s: float) -> NodePage:
        assert isinstance(handle, SlurmHandle)
        argv = [
            handle.login.python,
            "-c",
            remote.EVENTS_PY,
            handle.state_dir(node),
            str(after),
            str(PAGE_LIMIT),
            f"{max(0.0, wait_s):.1f}",
            handle.job_id,
            parse.SQUEUE_FIELDS,
        ]
        res = await self.inputs.ssh_pool().run(
            self._handle_target(handle), argv, timeout_s=wait_s + 60
        )
        try:
            answer = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            why = res.stderr[-300:]
            raise AgentError(f"{handle.host}: unreadable events answer: {why}") from None
        events = [Event.model_validate_json(line) for line in answer["events"]]
        more = int(answer["last"]) > (events[-1].seq if events else after)
        row = parse.parse_squeue(answer["squeue"]).get(handle.job_id)
        if row is not None and row.restarts > handle.restart and not events and not more:
            nxt = handle.model_copy(update={"restart": row.restarts})
            why = f"requeued by SLURM (restart {row.restarts}): {row.reason}"
            return NodePage([], RunState.QUEUED, False, None, why, next_attempt=nxt)
        state, code, msg = _node_state(handle, node, row, answer["status"])
        preempted = taken_back(state, row)
        return NodePage(events, state, more, code, msg, preempted=preempted)

    async def status(self, handle: BaseHandle) -> RunStatus:
        (one,) = await self.statuses([handle])
        if isinstance(one, Exception):
            raise one
        return one

    async def statuses(self, handles: Sequence[BaseHandle]) -> list[RunStatus | Exception]:
        by_host: dict[str, list[int]] = {}
        for i, h in enumerate(handles):
            assert isinstance(h, SlurmHandle)
            by_host.setdefault(h.host, []).append(i)
        out: list[RunStatus | Exception] = [AgentError("not asked")] * len(handles)

        async def host(indices: list[int]) -> None:
            hs = [handles[i] for i in indices]
            assert all(isinstance(h, SlurmHandle) for h in hs)
            slurm = [h for h in hs if isinstance(h, SlurmHandle)]
            req = {
                "jobs": sorted({h.job_id for h in slurm}),
                "dirs": [h.state_dir(n) for h in slurm for n in range(h.nodes)],
            }
            try:
                res = await self.inputs.ssh_pool().run(
                    self._handle_target(slurm[0]),
                    [slurm[0].login.python, "-c", remote.STATUSES_PY, parse.SQUEUE_FIELDS],
                    input=json.dumps(req),
                )
                answer = json.loads(res.stdout.strip().splitlines()[-1])
            except (TclError, ValueError, IndexError) as e:
                for i in indices:
                    out[i] = e if isinstance(e, TclError) else AgentError(str(e))
                return
            rows = parse.parse_squeue(answer["squeue"])
            for i, h in zip(indices, slurm, strict=True):
                row = rows.get(h.job_id)
                nodes = [
                    _node_state(h, n, row, answer["status"].get(h.state_dir(n)))
                    for n in range(h.nodes)
                ]
                state = worst_state([s for s, _, _ in nodes])
                code = next((c for _, c, _ in nodes if c), None)
                msg = next((m for _, _, m in nodes if m), "")
                out[i] = RunStatus(state, code, msg)

        await asyncio.gather(*(host(ix) for ix in by_host.values()))
        return out

    async def stop(self, handle: BaseHandle, grace_s: float, dump_stacks: bool = False) -> None:
        # dump_stacks: not here (the scheduler signals the job's processes, not its runner)
        """``scancel``: SLURM sends SIGTERM to every task, SIGKILL after its ``KillWait`` (the
        cluster's grace, not ``grace_s``); each runner forwards TERM to its job."""
        assert isinstance(handle, SlurmHandle)
        await self.inputs.ssh_pool().run(
            self._handle_target(handle), ["scancel", handle.job_id], check=False
        )

    async def release(self, handle: BaseHandle, state: RunState) -> None:
        """SLURM ended the job; every event of it is kept on the workstation. Its dir on the
        cluster (spec, script, event logs) is marked ended and removed once the host's
        ``run_dir_retention_s`` passed (with those of earlier runs past theirs)."""
        assert isinstance(handle, SlurmHandle)
        cfg = self.inputs.hosts.get(handle.host)
        retention = (
            cfg.run_dir_retention_s if isinstance(cfg, SlurmHost) else DEFAULT_RUN_DIR_RETENTION_S
        )
        argv = [handle.login.python, "-c", remote.PRUNE_PY, handle.run_dir, f"{retention:g}"]
        res = await self.inputs.ssh_pool().run(self._handle_target(handle), argv, check=False)
        try:
            answer = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            answer = {"error": (res.stderr or res.stdout).strip()[-500:]}
        if answer.get("error"):
            log.warning("%s: pruning run dirs: %s", handle.host, answer["error"])

    async def host_tasks(self, host: str) -> list[HostTask]:
        """This user's pending and running jobs on ``host`` named by tcl (``job_name``)."""
        cfg = self._cfg(host)
        res = await self.inputs.ssh_pool().run(
            self._target(host), [SlurmLogin.of(cfg).python, "-c", remote.TASKS_PY]
        )
        try:
            answer = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise AgentError(f"{host}: listing its jobs answered {res.stdout.strip()!r}") from None
        if answer["error"]:
            raise AgentError(f"{host}: squeue: {answer['error']}")
        out = []
        for j in answer["jobs"]:
            named = read_job_name(j["name"])
            if named is not None:
                out.append(HostTask(host, j["job_id"], *named, max(0.0, float(j["age_s"]))))
        return out

    async def end_task(self, task: HostTask) -> None:
        await self.inputs.ssh_pool().run(self._target(task.host), ["scancel", task.task_id])

    def ssh_endpoint(self, handle: BaseHandle, node: int) -> SshEndpoint | None:
        assert isinstance(handle, SlurmHandle)
        t = self._handle_target(handle)
        return SshEndpoint(
            host=t.host,
            port=t.port,
            user=t.user,
            identity_file=t.identity_file,
            known_hosts=t.known_hosts,
            proxy_jump=t.proxy_jump,
            ssh_config_file=t.config_file,
            remote_argv=_srun_shell(handle.job_id, node, pty=False),
            remote_tty_argv=_srun_shell(handle.job_id, node, pty=True),
        )

    async def check(self, host: str) -> HostCheck:
        try:
            rows = await self._sinfo(host)
        except TclError as e:
            return HostCheck(False, str(e).splitlines()[0])
        return HostCheck(True, parse.summary(rows))

    async def reset(self, handle: BaseHandle | None = None) -> None:
        if isinstance(handle, SlurmHandle):
            await self.inputs.ssh_pool().disconnect(self._handle_target(handle))


def _srun_shell(job_id: str, node: int, pty: bool) -> tuple[str, ...]:
    """A step in the job on its ``node``, running ``_SSH_SHELL``: with a pseudo-terminal for a
    shell (``--pty``), without for a command (srun's ``ioctl(TIOCGWINSZ)`` errors without a
    terminal, and its output stays clean for pipes)."""
    return (
        "srun",
        f"--jobid={job_id}",
        "--overlap",
        *(["--pty"] if pty else []),
        "--nodes=1",
        "--ntasks=1",
        f"--relative={node}",
        "bash",
        "-c",
        _SSH_SHELL,
        "tcl-ssh",
    )


# `tcl ssh RUN`: a login shell on the node; `tcl ssh RUN -- CMD`: CMD run by a shell there (like
# ssh's own `ssh host CMD`: the words are joined and the shell evaluates them)
_SSH_SHELL = '[ "${1-}" = -- ] && shift; [ "$#" -gt 0 ] && exec bash -lc "$*"; exec bash -l'
_SUBMIT = (
    'set -e; umask 077; mkdir -p "$1"; IFS= read -r spec; '
    'printf "%s\\n" "$spec" > "$1/spec.json.part"; mv "$1/spec.json.part" "$1/spec.json"; '
    'cat > "$1/job.sh"; cd "$1"; sbatch --parsable "$1/job.sh"'
)


def spec_line(job: JobSpec, fs: ClusterFs | None, token: str | None = None) -> str:
    """The spec file's one line: the JobSpec, with what each node mounts and the token its
    served API needs (a session) beside it."""
    if fs is None and token is None:
        return job.model_dump_json()
    body = job.model_dump(mode="json")
    if fs is not None:
        body[CLUSTER_FS_KEY] = fs.model_dump(mode="json")
    if token is not None:
        body[TOKEN_KEY] = token
    return json.dumps(body, separators=(",", ":"))


def _ordered(cfg: SlurmHost) -> list[Any]:
    return sorted(cfg.partitions, key=lambda p: not p.default)


_STOPPED = {"CANCELLED", "PREEMPTED", "TIMEOUT", "DEADLINE", "COMPLETING", "REQUEUED"}
# SLURM took the nodes back (not the job's doing): placed again with --retry, not counted. A
# time limit is the job's own: a failure, retried while --retry has attempts left (bounded: a
# job that never checkpoints is not resubmitted without end)
_TAKEN_BACK = {"PREEMPTED", "NODE_FAIL", "BOOT_FAIL"}
_TIME_LIMIT = "TIMEOUT"


def taken_back(state: RunState, row: parse.JobRow | None) -> bool:
    """Whether SLURM took the ended job back without requeueing it (a preemption in CANCEL
    mode, a node that failed or did not boot): the run's retry policy places it again as
    attempt + 1, not counted as a failure (a `tcl.jobs` trainer resumes from its checkpoint).
    A time limit is not: it is the job's own failure."""
    return state.is_final and row is not None and row.state in _TAKEN_BACK


def _node_state(
    h: SlurmHandle, node: int, row: parse.JobRow | None, status: dict[str, Any] | None
) -> tuple[RunState, int | None, str]:
    """One node's state from its ``status.json`` and the job's squeue row."""
    if row is not None and row.restarts > h.restart:
        # SLURM requeued the job (preemption, `scontrol requeue`): this attempt's runner ends
        # (SIGTERM) but the run does not; its events are read, then the next attempt starts
        return RunState.QUEUED, None, f"requeued by SLURM (restart {row.restarts}): {row.reason}"
    rstate = None
    code = None
    if isinstance(status, dict):
        try:
            rstate = RUNNER_STATES[RunnerState(str(status.get("state")))]
        except ValueError:
            rstate = None
        code = status.get("exit_code")
    if rstate is not None and rstate.is_final:
        ended = row.state if row is not None else ""
        signalled = rstate is RunState.TERMINATED or code == 143
        if signalled and ended in parse.LIVE:
            # SLURM's SIGTERM ended the job and SLURM has not said why yet (COMPLETING): a
            # preemption, a time limit and a scancel differ only in its final word
            return RunState.RUNNING, None, f"SLURM job {h.job_id} ending"
        stopped = ended in _STOPPED and (ended != "COMPLETING" or code == 143)
        if ended == _TIME_LIMIT:
            return RunState.FAILED, code, f"SLURM job {h.job_id} reached its time limit"
        if rstate is RunState.FAILED and stopped:
            # scancel, preemption, time limit: SLURM's SIGTERM ended the job (the runner
            # reports the job's 143 as a failure)
            return RunState.TERMINATED, code, f"SLURM job {h.job_id} {ended.lower()}"
        return rstate, code, ""
    if row is None:
        return (
            RunState.FAILED,
            code,
            (
                f"SLURM no longer knows job {h.job_id} and node {node} left no final status in "
                f"{posixpath.join(h.state_dir(node), 'status.json')}"
            ),
        )
    if row.state in parse.PENDING:
        return RunState.QUEUED, None, f"{row.state.lower()}: {row.reason}"
    if row.state in parse.LIVE:
        return rstate or RunState.PROVISIONING, None, ""
    ended = parse.ended_state(row.state)
    return ended, code, f"SLURM job {h.job_id} {row.state} ({row.reason})"
