"""A TPU node's life on its worker hosts: the netns sshd hosts of scripts/testbed/ssh-up.sh.

First boot runs the startup script on every worker (each with its own /var/lib/tcl-shim);
preemption runs the shutdown script, then kills what the workers ran; delete kills too, and
the hosts go back to the pool with their sshd still listening.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from google.cloud import tpu_v2

from tests.testbed import SshTestbed
from tests.tpuemu import TpuEmulator
from tests.tpuemu.client import client, wait
from tests.tpuemu.workers import hosts_of_testbed

pytestmark = [pytest.mark.integration, pytest.mark.tpu]

PROJECT, ZONE = "proj", "us-central2-b"
PARENT = f"projects/{PROJECT}/locations/{ZONE}"
DISK = "/var/lib/tcl-shim"
# Started in its own session, detached from the ssh channel, as a shim would be.
START_SLEEP = f"setsid sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > {DISK}/sleep.pid\n"


@pytest.fixture
def emu(ssh_testbed: SshTestbed, tmp_path: Path) -> Iterator[TpuEmulator]:
    for i in range(1, ssh_testbed.hosts + 1):
        for f in ssh_testbed.disk(i).iterdir():  # other tests' shims leave directories too
            if f.is_dir() and not f.is_symlink():
                shutil.rmtree(f)
            else:
                f.unlink()
    hosts = hosts_of_testbed(ssh_testbed.dir, ssh_testbed.hosts)
    with TpuEmulator(hosts, Path(ssh_testbed.config), log_dir=tmp_path, create_delay_s=0.1) as e:
        yield e


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _until(cond: object, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def _create(emu: TpuEmulator, node_id: str, accel: str, **metadata: str) -> tpu_v2.Node:
    node = tpu_v2.Node(accelerator_type=accel, runtime_version="tpu-ubuntu2204-base")
    node.metadata.update(metadata)
    created: tpu_v2.Node = wait(
        client(emu.url).create_node(parent=PARENT, node_id=node_id, node=node)
    )
    return created


def test_startup_script_runs_on_every_worker_with_its_own_disk(
    emu: TpuEmulator, ssh_testbed: SshTestbed
) -> None:
    script = f"echo booted on $(hostname -I) > {DISK}/boot\nls {DISK}\necho done\n"
    node = _create(emu, "pod", "v5p-24", **{"startup-script": script})  # 12 chips: 3 hosts
    ips = [e.ip_address for e in node.network_endpoints]
    assert ips == [ssh_testbed.ip(i) for i in (1, 2, 3)]
    assert emu.wait_startup("pod") == [0, 0, 0]
    for i, ip in enumerate(ips, start=1):
        assert (ssh_testbed.disk(i) / "boot").read_text().split() == ["booted", "on", ip]
        log = emu.startup_log("pod", i - 1)
        assert log.count("boot") == 1 and "done" in log and "--- exit 0" in log
    assert not Path(DISK, "boot").exists()  # each host's disk is private


def test_preempt_runs_the_shutdown_script_then_kills(
    emu: TpuEmulator, ssh_testbed: SshTestbed
) -> None:
    shutdown = f"echo preempted > {DISK}/notice\n"
    node = _create(
        emu, "spot", "v4-8", **{"startup-script": START_SLEEP, "shutdown-script": shutdown}
    )
    assert emu.wait_startup("spot") == [0]
    pid = int((ssh_testbed.disk(1) / "sleep.pid").read_text())
    assert _alive(pid)
    out = emu.preempt(PROJECT, ZONE, "spot", grace_s=10)
    assert out["shutdownExit"] == [0]
    assert (ssh_testbed.disk(1) / "notice").read_text() == "preempted\n"
    _until(lambda: not _alive(pid))
    after = client(emu.url).get_node(name=node.name)
    assert after.state == tpu_v2.Node.State.PREEMPTED
    assert [e.ip_address for e in after.network_endpoints] == [ssh_testbed.ip(1)]
    assert _alive(ssh_testbed.pid("h1"))  # the host's sshd survives (a later node reuses it)


def test_delete_kills_and_a_recreated_node_boots_again(
    emu: TpuEmulator, ssh_testbed: SshTestbed
) -> None:
    tpu = client(emu.url)
    node = _create(emu, "n", "v4-16", **{"startup-script": START_SLEEP})
    assert emu.wait_startup("n") == [0, 0]
    pids = [int((ssh_testbed.disk(i) / "sleep.pid").read_text()) for i in (1, 2)]
    assert all(_alive(p) for p in pids)
    wait(tpu.delete_node(name=node.name))
    _until(lambda: not any(_alive(p) for p in pids))
    assert _alive(ssh_testbed.pid("h1")) and _alive(ssh_testbed.pid("h2"))
    again = _create(emu, "n", "v4-16", **{"startup-script": START_SLEEP})
    assert emu.wait_startup("n") == [0, 0]
    assert [e.ip_address for e in again.network_endpoints] == [ssh_testbed.ip(1), ssh_testbed.ip(2)]
    new = [int((ssh_testbed.disk(i) / "sleep.pid").read_text()) for i in (1, 2)]
    assert new != pids and all(_alive(p) for p in new)
    wait(tpu.delete_node(name=again.name))
    _until(lambda: not any(_alive(p) for p in new))
    ssh = subprocess.run(
        ["ssh", "-F", ssh_testbed.config, ssh_testbed.ip(1), "echo", "up"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert ssh.stdout == "up\n"


def test_shutdown_script_is_cut_off_after_the_grace_period(
    emu: TpuEmulator, ssh_testbed: SshTestbed
) -> None:
    shutdown = f"echo start > {DISK}/notice\nsleep 60\necho never >> {DISK}/notice\n"
    _create(emu, "slow", "v4-8", **{"shutdown-script": shutdown})
    t0 = time.monotonic()
    # a grace the script's start fits in on a loaded machine (ssh, shell); its sleep does not
    out = emu.preempt(PROJECT, ZONE, "slow", grace_s=5)
    assert time.monotonic() - t0 < 30
    assert out["shutdownExit"] == [-9] and out["node"]["state"] == "PREEMPTED"
    assert (ssh_testbed.disk(1) / "notice").read_text() == "start\n"  # the sleep was killed


def test_each_host_has_a_private_var_lib_tcl_shim(ssh_testbed: SshTestbed) -> None:
    def ssh(i: int, cmd: str) -> str:
        argv = ["ssh", "-F", ssh_testbed.config, ssh_testbed.ip(i), cmd]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout

    mine = f"mine-{uuid.uuid4().hex}"
    ssh(1, f"echo h1 > {DISK}/{mine}")
    assert ssh(1, f"cat {DISK}/{mine}") == "h1\n"
    assert mine not in ssh(2, f"ls -A {DISK}").split()
    assert not Path(DISK, mine).exists()
    assert (ssh_testbed.disk(1) / mine).read_text() == "h1\n"
    (ssh_testbed.disk(1) / mine).unlink()
