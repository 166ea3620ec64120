"""`tcl` against a Kubernetes cluster with Volcano: the API emulator of tests/k8semu.

The real `tcl` CLI and its `kubernetes` client code, unchanged: code to the PVC through a helper
pod's exec stream, the spec in a Secret, one vcjob checked against the real CRD; each pod (a
process in its own network and mount namespaces) runs the real `tcl-runner batch --serve`, and
`tcl logs` reaches it through the API server's port-forward. JAX runs on CPU; the GPUs are only
the queue's accounting.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.integration.control.test_multinode_ssh import PSUM
from tests.integration.jobs.helpers import resumable_gpt_yaml
from tests.integration.orphansweep import sweep_given_up
from tests.integration.tclcli import TclEnv, run_tcl
from tests.k8semu.config import QueueSpec
from tests.k8semu.fixtures import GPU, Factory, new_client
from tests.k8semu.server import K8sEmulator
from tests.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.volcano]
PY = sys.executable
NS = "tcl"
TOTAL_STEPS = 80  # the eviction comes at the first checkpoint (step 10)
LOOP = "import time\nfor i in range(600):\n    print('tick', i, flush=True)\n    time.sleep(1)\n"


@dataclass
class Cluster:
    env: TclEnv
    emu: K8sEmulator
    kubeconfig: Path
    api: client.ApiClient

    def pods(self, run_id: str) -> list[Any]:
        core = client.CoreV1Api(self.api)
        return list(core.list_namespaced_pod(NS, label_selector=f"tcl.run-id={run_id}").items)

    def vcjobs(self) -> list[dict[str, Any]]:
        custom = client.CustomObjectsApi(self.api)
        got = custom.list_namespaced_custom_object("batch.volcano.sh", "v1alpha1", NS, "jobs")
        assert isinstance(got, dict)  # the list's JSON body (typed `object` by the client)
        return list(got["items"])

    def secret(self, run_id: str, attempt: int = 0) -> bool:
        """Whether the run's spec Secret exists."""
        from kubernetes.client.exceptions import ApiException

        from tcl.control.backends.volcano.manifest import spec_secret_name, vcjob_name

        try:
            client.CoreV1Api(self.api).read_namespaced_secret(
                spec_secret_name(vcjob_name(run_id, attempt)), NS
            )
        except ApiException as e:
            assert e.status == 404, e
            return False
        return True

    def run(self, run_id: str) -> dict[str, Any]:
        return self.env.ps_row(run_id)

    def wait(self, run_id: str, states: set[str], timeout_s: float = 120) -> dict[str, Any]:
        return self.env.wait_state(run_id, states, timeout_s)

    def pvc(self) -> Path:
        return Path(self.emu.config.pvcs[(NS, "workspace")])


def _config(kubeconfig: Path, extra: str = "", host_extra: str = "") -> str:
    return f"""
hosts:
  k8s:
    type: volcano
    namespace: {NS}
    queue: default
    image: tcl-runner:local
    pvc_name: workspace
    pvc_mount_path: /workspace
    chips: {{h100: 8}}
    kubeconfig: {kubeconfig}
    {host_extra}
{extra}"""


@pytest.fixture
def cluster(k8semu_factory: Factory, tmp_path: Path) -> Iterator[Cluster]:
    emu = k8semu_factory(queues=(QueueSpec("default", {GPU: 16}),))
    kubeconfig = emu.write_kubeconfig(tmp_path / "kubeconfig")
    home, repo = tmp_path / "home", tmp_path / "repo"
    home.mkdir()
    repo.mkdir()
    (repo / "psum.py").write_text(PSUM)
    (repo / "loop.py").write_text(LOOP)
    (repo / "gpt.yaml").write_text(resumable_gpt_yaml(TOTAL_STEPS))
    config = tmp_path / "config.yaml"
    config.write_text(_config(kubeconfig))
    api = new_client(kubeconfig)
    c = Cluster(TclEnv(home, config, repo), emu, kubeconfig, api)
    try:
        yield c
    finally:
        for r in c.env.tcl_json("ps", "-a"):
            if r["state"] not in ("succeeded", "failed", "terminated"):
                c.env.tcl("stop", "--grace", "1", r["run_id"], check=False)
        api.close()  # type: ignore[no-untyped-call]


def test_a_two_pod_job_runs_jax_across_both_and_its_logs_follow(cluster: Cluster) -> None:
    c = cluster
    res = c.env.tcl("submit", "--chip", "h100", "-n", "16", "--", PY, "psum.py", timeout=300)
    lines = sorted(line for line in res.stdout.splitlines() if "psum" in line)
    # one JAX process per pod, joined through the svc plugin's names; 1 + 2 summed
    assert lines == ["[pod 0] rank 0 of 2 psum 3.0", "[pod 1] rank 1 of 2 psum 3.0"], (
        res.stdout + res.stderr
    )
    (run,) = c.env.tcl_json("ps", "-a")
    assert (run["state"], run["host"]) == ("succeeded", "k8s"), run
    only = c.env.tcl("logs", run["run_id"], "--node", "1").stdout
    assert "rank 1 of 2 psum 3.0" in only and "rank 0" not in only
    # its Job, pods and Secret are gone once its logs are kept (the pods after their 1 s grace
    # period, which a loaded machine may stretch); the code stays on the PVC
    assert c.vcjobs() == []
    wait_until(lambda: c.pods(run["run_id"]), 30, "the run's pods deleted", done=lambda p: p == [])
    assert not c.secret(run["run_id"])
    assert len(list((c.pvc() / "tcl" / "code").glob("*.tar.gz"))) == 1


def test_stop_deletes_the_job_and_its_pods(cluster: Cluster) -> None:
    c = cluster
    run_id = c.env.tcl_json("submit", "-d", "--chip", "h100", "-n", "16", "--", PY, "loop.py")[
        "run_id"
    ]
    wait_until(lambda: c.env.stored_log(run_id), 120, "tick 2", done=lambda o: "tick 2" in o)
    assert len(c.pods(run_id)) == 2 and len(c.vcjobs()) == 1
    c.env.tcl("stop", "--grace", "2", run_id)
    assert c.run(run_id)["state"] == "terminated"
    assert c.vcjobs() == []
    deadline = time.monotonic() + 30
    while c.pods(run_id):  # deleted with their Job (the emulator stops them first)
        assert time.monotonic() < deadline
        time.sleep(0.3)


def test_a_gang_waits_until_the_queue_has_room_for_every_pod(cluster: Cluster) -> None:
    c = cluster
    blocker = c.env.tcl_json("submit", "-d", "--chip", "h100", "-n", "8", "--", PY, "loop.py")
    c.wait(blocker["run_id"], {"running"})
    # 16 GPUs, 8 held: room for one of the two pods, so neither starts
    gang = c.env.tcl_json("submit", "-d", "--chip", "h100", "-n", "16", "--", PY, "psum.py")
    run_id = gang["run_id"]
    # the reason the scheduler gives (the solver's at submit, then the pods' Unschedulable),
    # as `tcl ps` reads it from the store its controller keeps; meanwhile no pod starts
    reason = r"queue default: 8 of 16 nvidia.com/gpu free, 16 needed|Unschedulable"
    wait_until(
        lambda: c.env.tcl("ps", "-a").stdout,
        120,
        "the queued reason in tcl ps",
        done=lambda ps: re.search(rf"queued: ({reason})", ps),
    )
    run = c.run(run_id)
    assert run["state"] == "queued" and re.search(reason, run["message"]), run
    assert all(p.status.phase == "Pending" for p in c.pods(run_id))
    c.env.tcl("stop", "--grace", "1", blocker["run_id"])
    logs = c.env.tcl("logs", "-f", run_id, timeout=300).stdout
    assert "[pod 0] rank 0 of 2 psum 3.0" in logs and "[pod 1] rank 1 of 2 psum 3.0" in logs, logs
    assert c.run(run_id)["state"] == "succeeded"


def _latest(pvc: Path) -> str:
    try:
        found = sorted((pvc / "tcl" / "out").glob("checkpoints/**/latest"))
        return found[0].read_text().strip() if found else ""
    except FileNotFoundError:  # Orbax renamed a temporary directory while the walk was in it
        return ""


def test_an_evicted_pod_restarts_the_job_and_the_trainer_resumes(cluster: Cluster) -> None:
    c = cluster
    res = c.env.tcl_json(
        "submit",
        "-d",
        "--chip",
        "h100",
        "-n",
        "8",
        "--job",
        "gpt/train",
        "--job-config",
        "gpt.yaml",
    )
    run_id = res["run_id"]
    deadline = time.monotonic() + 300
    while not _latest(c.pvc()):
        assert time.monotonic() < deadline, c.env.tcl("logs", run_id).stdout[-3000:]
        time.sleep(0.5)
    (pod,) = c.pods(run_id)
    c.emu.evict(NS, pod.metadata.name)
    logs = c.env.tcl("logs", "-f", run_id, timeout=600).stdout
    run = c.run(run_id)
    assert run["state"] == "succeeded", (run, logs[-3000:])
    restored = re.findall(r"tcl\.jobs: restoring from \S+/step_(\d+)", logs)
    assert restored and 0 < int(restored[0]) < TOTAL_STEPS, logs[-3000:]
    assert _latest(c.pvc()) == f"step_{TOTAL_STEPS:08d}"
    from tcl.control.store import Store

    store = Store(f"sqlite:///{c.env.home / 'state' / 'tcl.db'}")
    try:
        attempts = store.attempts(run_id)
    finally:
        store.close()
    assert [(a.attempt, a.state.value) for a in attempts] == [(0, "terminated"), (1, "succeeded")]


def test_the_dry_run_prints_the_volcano_job(cluster: Cluster) -> None:
    out = cluster.env.tcl("submit", "--dry-run", "--chip", "h100", "-n", "16", "--", "true").stdout
    assert "kind: Job" in out and "minAvailable: 2" in out and "queue: default" in out, out
    assert cluster.vcjobs() == []


@pytest.mark.parametrize(
    ("case", "expect"),
    [
        ("missing-pvc", "PVC nope not found in namespace tcl"),
        ("forbidden-namespace", "may not"),
        ("unknown-queue", "Volcano queue nope not found"),
    ],
)
def test_bad_input_is_one_line_and_creates_nothing(
    cluster: Cluster, case: str, expect: str
) -> None:
    c = cluster
    args: list[str] = []
    if case == "missing-pvc":
        c.env.config.write_text(
            _config(c.kubeconfig).replace("pvc_name: workspace", "pvc_name: nope")
        )
    elif case == "forbidden-namespace":
        args = ["--volcano-namespace", "other"]
    else:
        c.env.config.write_text(_config(c.kubeconfig).replace("queue: default", "queue: nope"))
    res = c.env.tcl("submit", *args, "--chip", "h100", "-n", "8", "--", "true", check=False)
    assert res.returncode != 0, res.stdout + res.stderr
    errors = [ln for ln in res.stderr.splitlines() if expect in ln]
    assert len(errors) == 1, res.stderr
    assert c.vcjobs() == []
    runs = c.env.tcl_json("ps", "-a")
    assert all(not c.secret(r["run_id"]) for r in runs), runs
    core = client.CoreV1Api(c.api)
    assert core.list_namespaced_pod(NS).items == []
    assert json.dumps(runs).count('"running"') == 0


def test_the_orphan_sweep_deletes_the_vcjobs_no_live_attempt_names(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vcjob whose attempt was given up on while the API server did not answer (cause
    ``infra``: nobody releases it) is deleted with its spec Secret. (The job of a live attempt
    and one whose labels are not tcl's are left alone: tests/unit/control/test_orphans.py and
    tests/integration/slurm/test_slurm_orphans.py.)"""
    from tcl.control.backends.volcano.manifest import vcjob_name
    from tcl.control.daemon.client import stop_daemon

    c = cluster
    # placed (its vcjob made and recorded) once the detached submit returns
    given_up = c.env.tcl_json("submit", "-d", "--chip", "h100", "--", PY, "loop.py")["run_id"]
    stop_daemon(c.env.home / "state" / "serve")  # its controller would release it itself
    assert [j["metadata"]["name"] for j in c.vcjobs()] == [vcjob_name(given_up, 0)]
    _, ended = sweep_given_up(c.env.home, c.env.config, given_up, "volcano", "k8s", monkeypatch)
    assert ended == [vcjob_name(given_up, 0)]
    assert c.vcjobs() == [] and not c.secret(given_up)


def test_tcl_ssh_reaches_each_pod_through_the_exec_stream(cluster: Cluster) -> None:
    """Issue 32: `tcl ssh RUN [--node N] [-- CMD]` on Volcano, through the API server's
    pods/exec (no kubectl, no sshd in the pod): in the job's dir with its env, stdin relayed,
    the command's exit code, no terminal noise without a terminal."""
    from tcl.control.backends.volcano.manifest import vcjob_name

    c = cluster
    submit = ["submit", "-d", "--chip", "h100", "-n", "16", "--env", "FOO=bar"]
    run_id = c.env.tcl_json(*submit, "--", PY, "loop.py")["run_id"]
    wait_until(
        lambda: c.env.tcl("logs", run_id).stdout,
        120,
        "both pods' ticks",
        done=lambda out: "[pod 0] tick 1" in out and "[pod 1] tick 1" in out,
    )
    res = c.env.tcl("ssh", run_id, "--node", "1", "--", "hostname")
    assert (res.stdout, res.stderr) == (f"{vcjob_name(run_id, 0)}-worker-1\n", "")
    probe = 'echo "$FOO" "$(pwd)"; ls; echo oops >&2; exit 3'
    res = c.env.tcl("ssh", run_id, "--", "sh", "-c", probe, check=False)
    assert res.returncode == 3, res.stderr
    first, *listing = res.stdout.splitlines()
    assert first.startswith("bar /") and "loop.py" in listing, res.stdout
    assert res.stderr == "oops\n"
    res = run_tcl(["ssh", run_id, "--", "cat"], c.env.env(), c.env.repo, input="via stdin\n")
    assert res.stdout == "via stdin\n"
    # a shell with a terminal: keys relayed raw, the window's size is the pod terminal's
    out, code = _terminal_session(c, run_id, b'stty size; echo "X$FOO"; exit 7\n', (33, 97))
    assert code == 7 and b"33 97" in out and b"Xbar" in out, out
    c.env.tcl("stop", "--grace", "1", run_id)
    res = c.env.tcl("ssh", run_id, "--", "true", check=False)
    assert res.returncode == 1 and "terminated" in res.stderr, res.stderr


def _terminal_session(
    c: Cluster, run_id: str, keys: bytes, size: tuple[int, int]
) -> tuple[bytes, int]:
    """`tcl ssh RUN` on a terminal of ``size`` (rows, columns) that types ``keys``: what the
    terminal showed and the exit code."""
    import fcntl
    import os
    import select
    import struct
    import subprocess
    import termios

    from tests.integration.tclcli import TCL

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", *size, 0, 0))
    shell = subprocess.Popen(
        [TCL, "ssh", run_id],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=c.env.env(),
        cwd=c.env.repo,
    )
    os.close(slave)
    os.write(master, keys)
    out = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if not ready:
            if shell.poll() is not None:
                break
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the session ended and closed the terminal
            break
        if not chunk:
            break
        out += chunk
    os.close(master)
    try:
        return out, shell.wait(30)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the session did not end; the terminal showed {out!r}") from None
    finally:
        if shell.poll() is None:
            shell.kill()


# Waits for the test's word (a file on the PVC), then prints its lines at once and ends.
LATE = """
import os, sys, time
while not os.path.exists(os.environ["GO"]):
    time.sleep(0.1)
for i in range(200):
    print("late", i, flush=True)
"""


def test_lines_a_gone_runner_never_served_are_read_from_the_pod_log(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32: the pod log is the fallback. The daemon is killed while the job runs, the job
    prints its lines and ends, and its runner dies before anyone fetched them: the next
    look (`tcl ps`, the run's lease lapsed) reads them (and the job's end) from the pod's log,
    each line once, in order."""
    import os
    import signal

    c = cluster
    monkeypatch.setenv("TCL_SERVE_LEASE_S", "3")  # the next daemon takes over soon
    (c.env.repo / "late.py").write_text(LATE)
    go = c.pvc() / f"go-{time.monotonic_ns()}"
    submit = ["submit", "-d", "--chip", "h100", "-n", "8", "--env", f"GO=/workspace/{go.name}"]
    run_id = c.env.tcl_json(*submit, "--", PY, "late.py")["run_id"]
    c.wait(run_id, {"running"})
    os.kill(_daemon_pid(c.env.home), signal.SIGKILL)
    go.write_text("")
    (pod,) = c.pods(run_id)
    name = pod.metadata.name
    core = client.CoreV1Api(c.api)
    wait_until(
        lambda: core.read_namespaced_pod_log(name, NS),
        60,
        "the job's end in its log",
        done=lambda log: '"state":"succeeded"' in log,
    )
    os.kill(c.emu.pod_info(NS, name)["pid"], signal.SIGKILL)  # its runner, before its linger
    # no daemon owns the run now: `tcl ps` looks at it itself (its lease lapsed), so this wait
    # asks the CLI, not the store
    run = wait_until(
        lambda: c.run(run_id),
        120,
        f"{run_id} ended",
        done=lambda run: run["state"] in ("succeeded", "failed"),
    )
    assert run["state"] == "succeeded", run
    out = c.env.tcl("logs", run_id).stdout
    late = [line for line in out.splitlines() if "late" in line]
    assert late == [f"late {i}" for i in range(200)], out[-2000:]


def _daemon_pid(home: Path) -> int:
    import httpx

    sock = home / "state" / "serve" / "daemon.sock"
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), timeout=10) as h:
        return int(h.get("http://localhost/api/healthcheck").json()["pid"])
