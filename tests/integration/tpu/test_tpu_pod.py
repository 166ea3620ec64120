"""A TPU VM pod end to end: the real `tcl` command, the Cloud TPU API emulator
(``tests/tpuemu``), and the sshd testbed's netns hosts as the pod's workers.

Node ``tcl-pod`` (v5p-24: 12 chips on 3 workers, CPU workers whose shims report 4 fake
``tpu-v5p`` chips) is created on demand; its startup-script installs the real shim on each
worker (from this checkout's venv, which every worker sees); jobs run on all 3 workers as one
3-process JAX job. What is emulated: the Google API only (see tests/tpuemu/__init__.py).
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobs.helpers import resumable_gpt_yaml
from tests.integration.orphansweep import sweep_given_up
from tests.integration.tclcli import TCL, TclEnv
from tests.testbed import SshTestbed
from tests.tpuemu import TpuEmulator
from tests.tpuemu.workers import hosts_of_testbed

pytestmark = [pytest.mark.integration, pytest.mark.tpu]

PROJECT, ZONE, NODE = "proj", "us-central2-b", "tcl-pod"
VENV = str(Path(sys.executable).parent.parent)
PY = sys.executable
PSUM = """
from tcl.jobs.distributed import initialize
import jax
jax.config.update("jax_num_cpu_devices", 1)
initialize(initialization_timeout_s=120)
import jax.numpy as jnp
rank = jax.process_index()
total = jax.pmap(lambda x: jax.lax.psum(x, "i"), axis_name="i")(jnp.array([rank + 1.0]))
print(f"rank {rank} of {jax.process_count()} psum {float(total[0])}", flush=True)
jax.distributed.shutdown()
"""
# rank 1 fails; the others would wait for ever (as in a collective missing one process)
CRASH = """
import os, sys, time
rank = int(os.environ["TCL_NODE_RANK"])
print(f"rank {rank} up", flush=True)
if rank == 1:
    time.sleep(1)
    sys.exit(3)
time.sleep(600)
"""
IDLE_NODE = "tcl-ipod"
SLEEP = "import os, time; print('up', os.environ['TCL_NODE_RANK'], flush=True); time.sleep(600)"


@dataclass
class Pod:
    env: TclEnv
    emu: TpuEmulator
    root: Path  # the cluster's root: a directory every worker sees
    testbed: SshTestbed

    def node_state(self) -> str | None:
        try:
            return str(self.emu.node_info(NODE)["node"]["state"])
        except Exception:
            return None

    def runs(self) -> dict[str, Any]:
        return {r["run_id"]: r for r in self.env.tcl_json("ps", "-a")}

    def wait_state(self, run_id: str, states: set[str], timeout_s: float = 180) -> Any:
        return self.env.wait_state(run_id, states, timeout_s)


def _host(emu: TpuEmulator, tb: SshTestbed, node_id: str, extra: str) -> str:
    """One v5p-24 host (3 workers: the testbed's netns hosts) on the emulator."""
    return f"""
    type: tpu
    zone: {ZONE}
    project: {PROJECT}
    accelerator_type: v5p-24
    version: tpu-ubuntu2204-base
    node_id: {node_id}
    api_endpoint: {emu.url}
    credentials: anonymous
    ssh_user: root
    identity_file: {tb.key}
    known_hosts: {tb.known_hosts}
    connect_timeout_s: 3
    shim_venv: {VENV}
    fake_accelerators: "tpu-v5p:4"
    boot_timeout_s: 120{extra}"""


def _config(emu: TpuEmulator, tb: SshTestbed, root: Path) -> str:
    pod = _host(
        emu,
        tb,
        NODE,
        """
    cluster: pod
    spot: true
    metadata: {startup-script: "echo users-own-script-ran"}""",
    )
    # the same slice, asked for through a queued resource
    qpod = _host(emu, tb, "tcl-qpod", "\n    queued_resource: true")
    # the same slice again, deleted once idle for 15 s
    ipod = _host(emu, tb, IDLE_NODE, "\n    idle_timeout_s: 15")
    return f"""
clusters: {{pod: {{root: {root}}}}}
hosts:
  pod:{pod}
  qpod:{qpod}
  ipod:{ipod}
"""


@pytest.fixture(scope="module")
def pod(ssh_testbed: SshTestbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pod]:
    base = tmp_path_factory.mktemp("tpu")
    home, repo, root = base / "home", base / "repo", base / "root"
    for d in (home, repo, root):
        d.mkdir()
    for i in range(1, ssh_testbed.hosts + 1):  # fresh worker disks
        subprocess.run(["rm", "-rf", *map(str, ssh_testbed.disk(i).iterdir())], check=True)
    hosts = hosts_of_testbed(ssh_testbed.dir, 3)
    with TpuEmulator(
        hosts, Path(ssh_testbed.config), log_dir=base / "emu", create_delay_s=0.3
    ) as emu:
        config = base / "config.yaml"
        config.write_text(_config(emu, ssh_testbed, root))
        env = TclEnv(home, config, repo)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        (repo / "psum.py").write_text(PSUM)
        (repo / "crash.py").write_text(CRASH)
        (repo / "sleep.py").write_text(SLEEP)
        p = Pod(env, emu, root, ssh_testbed)
        try:
            yield p
        finally:
            for r in json.loads(env.tcl("ps", "-a", "--json", check=False).stdout or "[]"):
                if r["state"] not in ("succeeded", "failed", "terminated"):
                    env.tcl("stop", r["run_id"], check=False)
            env.tcl("serve", "--stop", check=False)
            if p.node_state() is not None:
                env.tcl("host", "down", "pod", check=False)


def _answering(
    env: TclEnv, args: list[str], answer: str, timeout_s: float = 400
) -> tuple[int, str]:
    """Run `tcl` on a terminal (its confirmation needs one) and answer its question."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [TCL, *args],
        cwd=env.repo,
        env=env.env(),
        stdin=slave,
        stdout=slave,
        stderr=slave,
        close_fds=True,
    )
    os.close(slave)
    out, answered = b"", False
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
                if not answered and b"Go ahead?" in out:
                    os.write(master, answer.encode() + b"\n")
                    answered = True
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return code, out.decode(errors="replace").replace("\r\n", "\n")


def _creates(emu: TpuEmulator) -> list[dict[str, Any]]:
    return [r for r in emu.requests() if r["method"] == "POST" and r["path"].endswith("/nodes")]


def test_create_on_demand_psum_on_every_worker_logs_and_stop(pod: Pod) -> None:
    env, emu = pod.env, pod.emu
    submit = ["submit", "--chip", "tpu-v5p", "-n", "12", "--", PY, "psum.py"]
    # no terminal to ask on: nothing is created
    refused = env.tcl(*submit, check=False)
    assert refused.returncode == 3, refused.stderr
    assert "create TPU node tcl-pod (v5p-24: 12 x tpu-v5p on 3 workers, spot" in refused.stderr
    assert "not confirmed: nothing was created" in refused.stderr
    assert _creates(emu) == [] and pod.node_state() is None
    # a "no" on a terminal: nothing either
    code, out = _answering(env, submit, "n")
    assert code == 3 and "nothing was created" in out, out
    assert _creates(emu) == []

    code, out = _answering(env, submit, "y")
    assert code == 0, out
    lines = sorted(line for line in out.splitlines() if "psum" in line)
    assert lines == [f"[worker {r}] rank {r} of 3 psum 6.0" for r in range(3)], out
    [create] = _creates(emu)
    body = create["body"]
    assert body["acceleratorType"] == "v5p-24" and body["schedulingConfig"]["spot"] is True
    assert "tcl-shim" in body["metadata"]["startup-script"]
    assert body["metadata"]["shutdown-script"]
    # the user's own startup-script was kept and ran on every worker
    for w in range(3):  # each worker's own disk
        assert "users-own-script-ran" in (pod.testbed.disk(w + 1) / "user-startup.log").read_text()
    (run,) = pod.runs().values()
    assert run["state"] == "succeeded" and run["host"] == "pod", run
    only = env.tcl("logs", run["run_id"], "--node", "2").stdout
    assert "rank 2 of 3 psum 6.0" in only and "rank 0" not in only

    hosts = env.tcl("hosts", "--check").stdout
    assert hosts.count("tpu-v5p: 4 of 4 free") == 3, hosts

    # the node is kept: a second job starts on it without creating anything; `tcl stop` ends
    # it on every worker and frees every chip
    res = env.tcl_json("submit", "-d", "--chip", "tpu-v5p", "-n", "12", "--", PY, "sleep.py")
    deadline = time.monotonic() + 120
    while sum(f"up {r}" in env.stored_log(res["run_id"]) for r in range(3)) < 3:
        assert time.monotonic() < deadline, env.tcl("logs", res["run_id"]).stdout
        time.sleep(0.5)
    assert len(_creates(emu)) == 1
    # `tcl ssh RUN --node 1` lands on worker 1 (process executor: the job runs on the worker)
    on = env.tcl("ssh", "--node", "1", res["run_id"], "--", "hostname", "-I").stdout
    assert on.split() == [pod.testbed.ip(2)], on
    env.tcl("stop", res["run_id"])
    assert pod.runs()[res["run_id"]]["state"] == "terminated"
    hosts = env.tcl("hosts", "--check").stdout
    assert hosts.count("tpu-v5p: 4 of 4 free") == 3, hosts


def test_a_crashing_worker_stops_the_others_and_fails_the_run_naming_it(pod: Pod) -> None:
    env = pod.env
    res = env.tcl(
        "submit",
        "--yes",
        "--chip",
        "tpu-v5p",
        "-n",
        "12",
        "--",
        PY,
        "crash.py",
        check=False,
        timeout=300,
    )
    assert res.returncode != 0, res.stdout
    run = max(pod.runs().values(), key=lambda r: r["created_at"])
    assert run["state"] == "failed", run
    assert run["message"] == "worker 1 failed (exit code 3); the other workers were stopped"
    hosts = env.tcl("hosts", "--check").stdout
    assert hosts.count("tpu-v5p: 4 of 4 free") == 3, hosts


def test_the_orphan_sweep_ends_the_worker_tasks_no_live_attempt_names(
    pod: Pod, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run given up on while its workers did not answer (cause ``infra``: nobody releases
    it) leaves a task on every worker: the orphan sweep ends them all, and the node is kept."""
    from tcl.control.backends.shimtasks import task_ids

    env = pod.env
    submit = ("submit", "-d", "--yes", "--chip", "tpu-v5p", "-n", "12", "--", PY, "sleep.py")
    run_id = env.tcl_json(*submit)["run_id"]  # (--yes: the node is made if it is not there)
    deadline = time.monotonic() + 120
    while sum(f"up {r}" in env.stored_log(run_id) for r in range(3)) < 3:
        assert time.monotonic() < deadline, env.tcl("logs", run_id).stdout
        time.sleep(0.5)
    env.tcl("serve", "--stop")  # its controller would release what the sweep should find
    attempt, ended = sweep_given_up(env.home, env.config, run_id, "tpu", "pod", monkeypatch)
    assert sorted(ended) == task_ids(run_id, attempt, 3), ended
    hosts = env.tcl("hosts", "--check").stdout
    assert hosts.count("tpu-v5p: 4 of 4 free") == 3, hosts
    assert pod.node_state() == "READY"


def test_dry_run_prints_the_node_request_and_calls_no_api(pod: Pod) -> None:
    env, emu = pod.env, pod.emu
    env.tcl("host", "down", "pod")
    emu.clear_requests()
    res = env.tcl(
        "submit",
        "--dry-run",
        "--chip",
        "tpu-v5p",
        "-n",
        "24",
        "--tpu-version",
        "v2-alpha-tpuv4",
        "--tpu-on-demand",
        "--",
        PY,
        "psum.py",
    )
    out = res.stdout
    assert "needs confirmation (--yes): create TPU node tcl-pod" in out
    assert f"# POST /v2/projects/{PROJECT}/locations/{ZONE}/nodes?nodeId={NODE}" in out
    assert '"runtimeVersion": "v2-alpha-tpuv4"' in out and '"spot": false' in out
    assert "# metadata startup-script" in out and "echo users-own-script-ran" in out
    assert "# then one task per worker (3)" in out
    assert [r for r in emu.requests() if r["method"] != "GET"] == []


def test_down_deletes_the_node_when_the_run_ends(pod: Pod) -> None:
    env = pod.env
    res = env.tcl(
        "submit",
        "--yes",
        "--down",
        "--chip",
        "tpu-v5p",
        "-n",
        "12",
        "--",
        PY,
        "psum.py",
        timeout=400,
    )
    assert "[worker 2] rank 2 of 3 psum 6.0" in res.stdout, res.stdout + res.stderr
    assert pod.node_state() is None
    assert "not created" in env.tcl("hosts", "--check").stdout


def test_an_idle_node_is_deleted_after_its_idle_timeout_and_hosts_counts_down(
    pod: Pod, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32: a node with idle_timeout_s stays while a run uses it, then the daemon deletes
    it once no run has used it for that long (nobody left billed); `tcl hosts --check` shows
    the countdown."""
    env, emu = pod.env, pod.emu
    env.tcl("serve", "--stop", check=False)  # the next daemon looks every 0.5 s
    monkeypatch.setenv("TCL_SERVE_IDLE_HOSTS_EVERY_S", "0.5")
    run_id = env.tcl_json(
        "submit",
        "-d",
        "--yes",
        "--host",
        "ipod",
        "--chip",
        "tpu-v5p",
        "-n",
        "12",
        "--",
        PY,
        "sleep.py",
    )["run_id"]
    pod.wait_state(run_id, {"running"}, timeout_s=300)
    time.sleep(16)  # longer than the timeout: a node in use stays
    assert emu.node_info(IDLE_NODE)["node"]["state"] == "READY"
    (busy,) = [h for h in env.tcl_json("hosts", "--check") if h["name"] == "ipod"]
    assert busy["idle_delete_in_s"] is None, busy
    env.tcl("stop", run_id)
    pod.wait_state(run_id, {"terminated"})
    (idle,) = [h for h in env.tcl_json("hosts", "--check") if h["name"] == "ipod"]
    # counting down; or (a machine so loaded that asking took longer) deleted already
    if "idle_delete_in_s" in idle or _node_exists(emu, IDLE_NODE):
        assert 0 <= idle["idle_delete_in_s"] <= 15, idle
        table = env.tcl("hosts", "--check").stdout
        assert "idle: node deleted in" in table or not _node_exists(emu, IDLE_NODE), table
    deadline = time.monotonic() + 30
    while _node_exists(emu, IDLE_NODE):
        assert time.monotonic() < deadline, "the idle node was not deleted"
        time.sleep(0.3)
    assert "not created" in env.tcl("hosts", "--check").stdout


def _node_exists(emu: TpuEmulator, node_id: str) -> bool:
    try:
        emu.node_info(node_id)
    except Exception:
        return False
    return True


def _latest(out: Path) -> str | None:
    for _ in range(10):
        try:
            found = sorted(out.glob("checkpoints/**/latest"))
            return found[0].read_text().strip() if found else None
        except FileNotFoundError:  # a checkpoint's .partial dir was renamed while walked
            continue
    return None


TOTAL_STEPS = (
    80  # the preemption comes at the first checkpoint (step 10); 0.2 s a step on 3 workers
)
GPT = resumable_gpt_yaml(TOTAL_STEPS)


def test_a_preempted_pod_is_recreated_and_the_trainer_resumes(pod: Pod) -> None:
    env, emu = pod.env, pod.emu
    (env.repo / "gpt.yaml").write_text(GPT)
    out = pod.root / "out"
    res = env.tcl_json(
        "submit",
        "-d",
        "--yes",
        "--chip",
        "tpu-v5p",
        "-n",
        "12",
        # the pod itself is recreated: placed again while its node was still going away, an
        # unpinned run took the other slice, a queued resource that waits for the preempted
        # node's hosts, and gave up only after its boot timeout (120 s of this test's 205 s)
        "--host",
        "pod",
        "--job",
        "gpt/train",
        "--job-config",
        "gpt.yaml",
        "--env",
        f"TCL_OUT_DIR={out}",
    )
    run_id = res["run_id"]
    deadline = time.monotonic() + 300
    while _latest(out) is None:
        assert time.monotonic() < deadline, env.tcl("logs", run_id).stdout[-3000:]
        time.sleep(0.3)
    emu.preempt(PROJECT, ZONE, NODE, grace_s=20)
    logs = env.tcl("logs", "-f", run_id, timeout=600).stdout
    run = pod.runs()[run_id]
    assert run["state"] == "succeeded", (run, logs[-3000:])
    restored = re.findall(r"tcl\.jobs: restoring from \S+/step_(\d+)", logs)
    assert restored, logs[-3000:]
    assert 0 < int(restored[0]) < TOTAL_STEPS
    assert _latest(out) == f"step_{TOTAL_STEPS:08d}"
    from tcl.control.store import Store

    store = Store(f"sqlite:///{env.home / 'state' / 'tcl.db'}")
    try:
        attempts = store.attempts(run_id)
    finally:
        store.close()
    # attempt 0 preempted; the last one succeeded; any between is a placement that found
    # nothing free yet while the preempted node was going away (its queued resource undone)
    assert attempts[0].state.value == "terminated" and attempts[-1].state.value == "succeeded"
    assert all(a.state.value == "terminated" for a in attempts[1:-1]), attempts


class _Quiet:
    def status(self, text: str) -> None: ...

    def progress(self, done: int, total: int) -> None: ...

    def note(self, text: str) -> None: ...


def test_a_worker_without_capacity_leaves_nothing_running_on_the_others(
    pod: Pod, monkeypatch: pytest.MonkeyPatch
) -> None:
    """All workers or none: worker 2's shim refuses (its chips taken after the plan was made),
    so the tasks already created on workers 0 and 1 are terminated before the error returns."""
    import asyncio

    from tcl.control.backends.base import Handle
    from tcl.control.backends.tpu.backend import TpuBackend
    from tcl.control.config import load_config
    from tcl.control.errors import NoCapacityError, TaskNotFoundError
    from tcl.control.paths import cache_dir
    from tcl.control.service import Control
    from tcl.control.shipping import snapshot
    from tcl.control.solver import Request, solve
    from tcl.runner.api import CodeRef, JobSpec
    from tcl.shim.api import ExecutorKind, TaskSpec, TaskStatus, TerminationReason

    if pod.node_state() != "READY":  # the node exists when the pod's earlier tests ran
        pod.env.tcl(
            "submit", "--yes", "--chip", "tpu-v5p", "-n", "12", "--", PY, "psum.py", timeout=400
        )
    for k, v in pod.env.env().items():
        monkeypatch.setenv(k, v)

    async def scenario() -> tuple[list[Handle], list[str]]:
        ctl = Control(load_config(pod.env.config))
        try:
            backend = ctl.backend_of("pod")
            assert isinstance(backend, TpuBackend)
            sol = await solve(ctl.cfg, Request(chip="tpu-v5p", chips=12), ctl.backend_of)
            plan = sol.candidates[0]
            assert plan.params["action"] == "use"
            blocker_shim = await backend.host("pod/w2").shim()
            await blocker_shim.create_task(
                TaskSpec(id="blocker", executor=ExecutorKind.PROCESS, accelerators=4)
            )
            snap = snapshot(pod.env.repo, cache_dir(), 10**8)
            job = JobSpec(
                run_id="r-cap",
                argv=[PY, "sleep.py"],
                code=CodeRef(sha256=snap.sha256, size=snap.size),
            )
            handles: list[Handle] = []
            try:
                with pytest.raises(NoCapacityError):
                    await backend.launch(plan, job, snap, None, _Quiet(), handles.append)
            finally:
                await blocker_shim.terminate_task("blocker", TerminationReason.STOPPED_BY_USER)
                await blocker_shim.remove_task("blocker")
            live = []
            last = handles[-1] if handles else None  # every node's task, named before made
            for n in getattr(last, "nodes", []):
                try:
                    task = await (await backend.host(n.host).shim()).get_task(n.task_id)
                except TaskNotFoundError:
                    continue  # never made (the worker that refused), or removed
                if task.status is not TaskStatus.TERMINATED:
                    live.append(n.task_id)
            return handles, live
        finally:
            await ctl.aclose()

    _, live = asyncio.run(scenario())
    # whichever creates reached workers 0 and 1 (answered or cut short when worker 2 refused),
    # none is left holding chips
    assert live == [], live
    hosts = pod.env.tcl("hosts", "--check").stdout
    assert hosts.count("tpu-v5p: 4 of 4 free") == 3, hosts


def test_a_queued_resource_is_asked_for_waited_on_and_deleted_with_down(pod: Pod) -> None:
    env, emu = pod.env, pod.emu
    if pod.node_state() is not None:
        env.tcl("host", "down", "pod")  # its workers are the pool's only hosts
    emu.clear_requests()
    res = env.tcl(
        "submit",
        "--yes",
        "--down",
        "--host",
        "qpod",
        "--chip",
        "tpu-v5p",
        "-n",
        "12",
        "--",
        PY,
        "psum.py",
        timeout=400,
    )
    assert "[worker 1] rank 1 of 3 psum 6.0" in res.stdout, res.stdout + res.stderr
    writes = [
        (r["method"], r["path"].rsplit("/", 1)[-1]) for r in emu.requests() if r["method"] != "GET"
    ]
    assert ("POST", "queuedResources") in writes, writes
    assert ("POST", "nodes") not in writes, writes  # the queued resource made the node
    assert ("DELETE", "tcl-qpod") in writes, writes  # --down: the node and its request
    qr = [r for r in emu.requests() if r["method"] == "POST" and r["path"].endswith("Resources")]
    spec = qr[0]["body"]["tpu"]["nodeSpec"][0]
    assert spec["nodeId"] == "tcl-qpod" and spec["node"]["acceleratorType"] == "v5p-24"
