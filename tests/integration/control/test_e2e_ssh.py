"""End to end through the real `tcl` command: sshd hosts, dockerd, shims from `tcl host setup`.

Hosts (see conftest.py for the sshd testbed):
* ``gpu-h100``: sshd on 127.0.0.1:2222 (root network namespace), shim with the docker executor
  and fake accelerators h100:8, jobs in the runner image. Containers publish their runner and
  sshd ports on the root namespace's loopback, which is what this host's sshd forwards to.
* ``gpu-a100``: sshd inside netns ``infra-h1`` (10.213.0.11), reached through the
  127.0.0.1:2222 sshd as a jump host, shim with the process executor
  and fake accelerators a100:4. A shim inside a netns can reach dockerd through its unix
  socket, but the ports docker publishes live in the root namespace, out of reach of that
  host's sshd; so this host runs jobs as processes (the runner binds the netns loopback).
* ``dead``: nothing listens there; the solver must skip it with a reason.
Both shims run from this checkout's venv (``shim_venv``: the filesystem is shared by the
namespaces), which is how `tcl host setup` is pointed at hosts without PyPI access.
Only the accelerators are fake (there is no GPU here); everything else is the real thing.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker.errors
import httpx
import pytest

from tests.integration.control.sshlab import (
    VENV,
    Env,
    cleanup,
    free_port,
    git,
    kill_connections,
    stop_shims,
)
from tests.integration.tclcli import TCL, run_tcl
from tests.testbed import SshTestbed
from tests.uvproject import DEP, GROUP, GROUP_DEP, make_project

N_LINES = 400

JOB = f"""
import os, sys, time
for i in range({N_LINES}):
    print(f"line {{i}}", flush=True)
    if i % 10 == 0:
        time.sleep(0.3)
print("FILES", sorted(os.listdir(".")), flush=True)
print("TRAIN", open("train.py").read().strip(), flush=True)
"""


@pytest.fixture(scope="module")
def e2e(
    ssh_testbed: SshTestbed,
    runner_image: str,
    docker_client: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("e2e")
    home, repo = root / "home", root / "repo"
    home.mkdir()
    repo.mkdir()
    shim_dirs = {"gpu-h100": root / "shim-h100", "gpu-a100": root / "shim-a100"}
    tb = ssh_testbed
    common = (
        f"user: root, identity_file: {tb.key}, known_hosts: {tb.known_hosts}, "
        f"ssh_config_file: {tb.config}, connect_timeout_s: 3, shim_venv: {VENV}"
    )
    config = root / "config.yaml"
    config.write_text(f"""
hosts:
  dead: {{type: ssh, ssh: 127.0.0.1, port: {free_port()}, {common}}}
  gpu-a100: {{type: ssh, ssh: 10.213.0.11, proxy_jump: "127.0.0.1:2222", {common},
             shim_port: {free_port()},
             shim_dir: {shim_dirs["gpu-a100"]}, executor: process, fake_accelerators: "a100:4",
             uv_groups: [{GROUP}]}}
  gpu-h100: {{type: ssh, ssh: 127.0.0.1, port: 2222, {common}, shim_port: {free_port()},
             shim_dir: {shim_dirs["gpu-h100"]}, executor: docker, fake_accelerators: "h100:8",
             image: "{runner_image}"}}
priority: [dead, gpu-a100, gpu-h100]
""")
    env = Env(home, config, repo, shim_dirs)
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text("*.ckpt\n")
    (repo / "train.py").write_text("print('committed')\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "init")
    (repo / "train.py").write_text("print('uncommitted edit')\n")
    (repo / "untracked_new.py").write_text("x = 1\n")
    (repo / "weights.ckpt").write_text("ignored\n")
    try:
        for host in ("gpu-h100", "gpu-a100"):
            res = env.tcl("host", "setup", host, "--json")
            info = json.loads(res.stdout)
            assert info["started"].startswith("daemon"), info
        yield env
    finally:
        cleanup(env, docker_client)
        stop_shims(shim_dirs.values())


def test_hosts_check_lists_offers_and_unreachable(e2e: Env) -> None:
    rows = {h["name"]: h for h in e2e.tcl_json("hosts", "--check")}
    assert rows["dead"]["reachable"] is False and "ssh dead" in rows["dead"]["detail"]
    assert rows["gpu-a100"]["detail"] == "a100: 4 of 4 free"
    assert rows["gpu-h100"]["reachable"] is True
    assert len(rows["gpu-h100"]["accelerators"]) == 8


def test_a100_job_runs_inside_the_netns_host_through_a_jump(e2e: Env) -> None:
    res = e2e.tcl("submit", "--chip", "a100", "--", "hostname", "-I")
    assert res.stdout.split() == ["10.213.0.11"], res.stderr  # the job ran inside infra-h1
    assert "started on gpu-a100 (accelerators 0)" in res.stderr
    assert "skipped dead: unreachable" in res.stderr


def test_a_uv_project_s_job_runs_in_its_environment_on_a_process_host(
    e2e: Env, tmp_path: Path
) -> None:
    """Built on the host (inside its network namespace) from the shipped uv.lock, with the
    host's `uv_groups`; the job's python is that environment's, not the shim's venv."""
    repo = make_project(tmp_path / "uvrepo")
    offline = ["--env", "UV_PYTHON_DOWNLOADS=never", "--env", "UV_OFFLINE=1"]
    argv = ["submit", "--chip", "a100", *offline, "--", "python", "job.py"]
    res = run_tcl(argv, e2e.env(), repo)
    assert "started on gpu-a100" in res.stderr, res.stderr
    assert f"{DEP} yes" in res.stdout and f"{GROUP_DEP} yes" in res.stdout, res.stdout
    assert "dep says from the project's lock" in res.stdout
    assert f"python {e2e.shim_dirs['gpu-a100']}" in res.stdout  # under the shim's code cache
    assert f"python {VENV}\n" not in res.stdout


IMAGE_JOB = """import importlib.util, sys
print("python", sys.prefix)
print("base", sys.base_prefix)
for name in ("tclprobe_dep", "tclprobe_extra"):
    print(name, "yes" if importlib.util.find_spec(name) else "no")
print("image packages", "yes" if "/usr/lib/python3/dist-packages" in sys.path else "no")
"""


def test_a_uv_project_s_job_runs_on_the_image_s_python_with_its_lock_in_a_container(
    e2e: Env, tmp_path: Path
) -> None:
    """The docker executor: the environment is built once (in the shim's code cache, shared
    by the host's containers) on the image's python3, and sees the image's packages after the
    lock's; the second run's container reuses it."""
    repo = make_project(tmp_path / "uvrepo")
    (repo / "image_job.py").write_text(IMAGE_JOB)
    offline = ["--env", "UV_PYTHON_DOWNLOADS=never", "--env", "UV_OFFLINE=1"]
    argv = ["submit", "--chip", "h100", "--group", GROUP, *offline, "--", "python", "image_job.py"]
    outs = []
    for _ in range(2):
        res = run_tcl(argv, e2e.env(), repo, timeout=240)
        assert "started on gpu-h100" in res.stderr, res.stderr
        outs.append(res.stdout + res.stderr)
    first, second = outs
    assert f"{DEP} yes" in first and f"{GROUP_DEP} yes" in first, first
    assert "python /var/cache/tcl-code/envs/" in first  # the shim's code cache, in the container
    assert "base /usr\n" in first and "image packages yes" in first  # Debian's python3, its site
    assert "(built in" in first and "(reused)" in second, second
    assert first.split("python ")[1].split()[0] == second.split("python ")[1].split()[0]
    envs = e2e.shim_dirs["gpu-h100"] / "state" / "code-cache" / "envs"
    (env,) = [p for p in envs.iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert (env / "pyvenv.cfg").read_text().count("include-system-site-packages = true") == 1


def test_nothing_fits_lists_each_host(e2e: Env) -> None:
    res = e2e.tcl("submit", "--chip", "h100", "-n", "9", "--", "true", check=False)
    assert res.returncode == 1
    assert "nothing fits 9 x h100" in res.stderr
    assert "  gpu-h100: h100: " in res.stderr and " of 8 free" in res.stderr
    assert "  gpu-a100: a100: 4 of 4 free" in res.stderr
    assert "  dead: unreachable: ssh dead" in res.stderr


def _accepted(tb: SshTestbed) -> int:
    """How many connections the 127.0.0.1:2222 sshd has accepted so far (from its log)."""
    return (tb.dir / "sshd_lo.log").read_text().count("Accepted publickey")


def _follow(e2e: Env, run_id: str) -> subprocess.Popen[str]:
    """`tcl logs -f RUN`, its output piped."""
    return subprocess.Popen(
        [TCL, "logs", "-f", run_id],
        cwd=e2e.repo,
        env=e2e.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_submit_follow_through_a_cut_ssh_connection(e2e: Env, ssh_testbed: SshTestbed) -> None:
    sub = e2e.tcl_json(
        "submit", "--chip", "h100", "-n", "2", "-d", "--name", "e2e", "--", "python3", "-c", JOB
    )
    assert sub["host"] == "gpu-h100" and sub["accelerators"] == [0, 1]
    assert sub["skipped"][0]["host"] == "dead"
    assert sub["skipped"][0]["reason"].startswith("unreachable")
    assert sub["code"]["uploaded_bytes"] > 0
    accepted_before = _accepted(ssh_testbed)
    follow = _follow(e2e, sub["run_id"])
    assert follow.stdout is not None
    seen = []
    cut = 0
    for line in follow.stdout:
        seen.append(line.rstrip("\n"))
        if len(seen) >= 120 and not cut:  # until a live connection is there to cut
            cut = kill_connections(ssh_testbed)
    err = follow.stderr.read() if follow.stderr else ""
    assert follow.wait(60) == 0, err
    assert cut >= 1
    # the run's owner (the daemon's controller) pulls it, not `logs -f`, a reader of what it
    # keeps: the cut forces the owner to connect again, and the follow loses nothing
    assert _accepted(ssh_testbed) - accepted_before >= 1, err
    logs = [s for s in seen if s.startswith("line ")]
    assert logs == [f"line {i}" for i in range(N_LINES)]  # nothing lost, nothing repeated
    files = next(s for s in seen if s.startswith("FILES"))
    assert "untracked_new.py" in files and "weights.ckpt" not in files
    assert "TRAIN print('uncommitted edit')" in seen
    # kept locally: readable without the host
    again = e2e.tcl("logs", sub["run_id"]).stdout.splitlines()
    assert [s for s in again if s.startswith("line ")] == logs
    # same tree again: nothing is uploaded
    sub2 = e2e.tcl_json("submit", "--chip", "h100", "-n", "1", "-d", "--", "true")
    assert sub2["code"]["sha256"] == sub["code"]["sha256"]
    assert sub2["code"]["uploaded_bytes"] == 0


CUT_LINES, CUTS = 100_000, 20
CHUNK = CUT_LINES // CUTS
# 20 chunks of 5,000 lines; after each the job waits for the test to cut the connections
CUT_JOB = f"""
import os, sys, time
for chunk in range({CUTS}):
    first = chunk * {CHUNK}
    sys.stdout.write("".join(f"line {{i}}\\n" for i in range(first, first + {CHUNK})))
    sys.stdout.flush()
    while not os.path.exists(os.path.join(os.environ["FLAGS"], str(chunk))):
        time.sleep(0.05)
sys.exit(3)
"""


def _cut(tb: SshTestbed) -> int:
    """Cut the live connections (waiting for one to exist: the owner reconnects first)."""
    deadline = time.monotonic() + 60
    while not (killed := kill_connections(tb)):
        assert time.monotonic() < deadline, "no connection to cut"
        time.sleep(0.05)
    return killed


def test_logs_follow_through_twenty_ssh_cuts_keeps_every_line_once_and_the_exit_code(
    e2e: Env, ssh_testbed: SshTestbed, tmp_path: Path
) -> None:
    """100,000 lines; after each 5,000 the SSH connections that carry them are cut (20 cuts,
    each while the job runs): `tcl logs -f` prints each line once, in order, and exits with the
    job's exit code."""
    flags = tmp_path / "flags"
    flags.mkdir()
    argv = ["python3", "-c", CUT_JOB]
    sub = e2e.tcl_json("submit", "--chip", "a100", "-d", "--env", f"FLAGS={flags}", "--", *argv)
    follow = _follow(e2e, sub["run_id"])
    assert follow.stdout is not None
    lines, cuts = [], 0
    for raw in follow.stdout:
        line = raw.rstrip("\n")
        if not line.startswith("line "):
            continue
        lines.append(line)
        if len(lines) % CHUNK == 0:  # the job waits: cut what carries its lines, then go on
            cuts += _cut(ssh_testbed) > 0
            (flags / str(len(lines) // CHUNK - 1)).touch()
    err = follow.stderr.read() if follow.stderr else ""
    assert follow.wait(60) == 3, err[-2000:]
    assert cuts == CUTS
    assert len(lines) == CUT_LINES and lines == [f"line {i}" for i in range(CUT_LINES)]


def test_submits_reuse_the_daemons_warm_ssh_connection(e2e: Env, ssh_testbed: SshTestbed) -> None:
    """`tcl submit` runs in the `tcl serve` daemon, which keeps the host's SSH connection (and
    its forwards) open between commands: later submits open no new connection."""
    e2e.tcl_json("submit", "--chip", "h100", "-n", "1", "-d", "--", "true")  # warm
    # the daemon's own count: the testbed's sshd also counts whatever else of the session
    # connects meanwhile (an earlier test's daemon lingering, its orphan sweep)
    before = _daemon_ssh_connects(e2e.home)
    assert before[1] >= 1, before
    for i in range(3):
        res = e2e.tcl(
            "submit", "--chip", "h100", "-n", "1", "--", "python3", "-c", f"print('warm {i}')"
        )
        assert res.stdout.splitlines()[-1:] == [f"warm {i}"], res.stderr
    assert _daemon_ssh_connects(e2e.home) == before  # the same daemon, no new connection
    # `tcl hosts --check` asks the daemon: the hosts over its warm connections (a second look
    # opens none), the same answer the CLI gives without it
    served = e2e.tcl_json("hosts", "--check")
    warm = _daemon_ssh_connects(e2e.home)
    assert e2e.tcl_json("hosts", "--check") == served and _daemon_ssh_connects(e2e.home) == warm
    alone = run_tcl(["hosts", "--check", "--json"], {**e2e.env(), "TCL_SERVE": "0"}, e2e.repo)
    assert json.loads(alone.stdout) == served


def _daemon_ssh_connects(home: Path) -> tuple[int, int]:
    """The pid of ``home``'s `tcl serve` and how many SSH connections it has opened."""
    sock = home / "state" / "serve" / "daemon.sock"
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), timeout=10) as h:
        status = h.get("http://localhost/api/status").json()
    return int(status["pid"]), int(status["ssh_connects"])


def test_ps_ssh_stop(e2e: Env, docker_client: Any) -> None:
    sub = e2e.tcl_json("submit", "--chip", "h100", "-n", "2", "-d", "--", "sleep", "300")
    run_id = sub["run_id"]
    rows = {r["run_id"]: r for r in e2e.tcl_json("ps")}
    assert rows[run_id]["state"] == "running" and rows[run_id]["host"] == "gpu-h100"
    res = e2e.tcl("ssh", run_id, "--", "hostname")
    (container,) = docker_client.containers.list(
        filters={"label": f"tcl.shim.task-id={sub['task_id']}"}
    )
    assert res.stdout.strip() == container.attrs["Config"]["Hostname"]
    assert res.stdout.strip() != socket.gethostname()
    stopped = e2e.tcl("stop", run_id)
    assert "terminated" in stopped.stderr
    rows = {r["run_id"]: r for r in e2e.tcl_json("ps", "-a")}
    assert rows[run_id]["state"] == "terminated"
    # Its logs are kept locally now, so the shim removed the container (or is stopping it).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            container.reload()
        except docker.errors.NotFound:
            break
        if container.status != "running":
            break
        time.sleep(0.5)
    else:
        raise AssertionError("the stopped run's container still runs")


def test_bad_config_names_key_and_line(e2e: Env, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts:\n  x:\n    type: ssh\n    ssh: h\n    shim_port: lots\n")
    res = e2e.tcl("-c", str(bad), "ps", check=False)
    assert res.returncode == 2
    assert f"{bad}:5: hosts.x.shim_port:" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
