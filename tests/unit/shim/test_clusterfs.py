"""The shim's cluster mounts with a stand-in ``juicefs`` (a script) and a mount table of its own.

The stand-in records each call (argv, and whether ``META_PASSWORD`` was in its environment)
and adds or removes its line in the table, as a real mount would in /proc/self/mountinfo. The
real ``juicefs`` through FUSE is tests/integration/control/test_juicefs.py.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path

import pytest

from tcl.clusterfs_node import explain, mounted_fstype
from tcl.shim.api import ClusterFs
from tcl.shim.clusterfs import ClusterMounts
from tcl.shim.errors import MountFailed
from tests.polling import await_until

FAKE = """\
import json, os, sys
calls, table = sys.argv[1], sys.argv[2]
argv = sys.argv[3:]
with open(calls, "a") as f:
    f.write(json.dumps({"argv": argv, "password": os.environ.get("META_PASSWORD")}) + "\\n")
if os.environ.get("META_PASSWORD") == "wrong":
    print("<FATAL>: WRONGPASS invalid username-password pair or user is disabled.")
    sys.exit(1)
mp = argv[-1]
lines = open(table).read().splitlines()
if argv[0] == "mount":
    lines.append(f"99 1 0:99 / {mp} rw,relatime - fuse.juicefs JuiceFS:vol rw")
else:
    lines = [ln for ln in lines if f" {mp} " not in ln]
open(table, "w").write("".join(ln + "\\n" for ln in lines))
"""

IDLE_S = 0.2  # the test mounts' unmount_after_idle_s


class Env:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.calls = tmp / "calls.jsonl"
        self.table = tmp / "mountinfo"
        self.table.write_text("1 0 8:1 / / rw - ext4 /dev/sda1 rw\n")
        self.fuse = tmp / "fuse"
        self.fuse.touch()
        script = tmp / "juicefs.py"
        script.write_text(FAKE)
        self.binary = tmp / "juicefs"
        self.binary.write_text(
            f'#!/bin/sh\nexec {sys.executable} {script} {self.calls} {self.table} "$@"\n'
        )
        self.binary.chmod(0o755)
        self.state = tmp / "state"
        self.state.mkdir()
        self.port = _listening_port()

    def mounts(self) -> ClusterMounts:
        return ClusterMounts(self.state, self.fuse, self.table, lambda: str(self.binary))

    def fs(self, mp: str = "/", **kw: object) -> ClusterFs:
        fields: dict[str, object] = {
            "meta_url": f"redis://127.0.0.1:{self.port[0]}/1",
            "meta_password": "s3cret",
            "mount_point": str(self.tmp / "root") if mp == "/" else mp,
            "unmount_after_idle_s": IDLE_S,
        }
        return ClusterFs.model_validate({**fields, **kw})

    def recorded(self) -> list[dict[str, object]]:
        if not self.calls.exists():
            return []
        return [json.loads(line) for line in self.calls.read_text().splitlines()]


def _listening_port() -> tuple[int, socket.socket]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s.getsockname()[1], s


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


async def test_one_mount_for_many_tasks_unmounted_once_idle(env: Env) -> None:
    m = env.mounts()
    fs = env.fs(cache_size_mib=1024, all_squash="1000:1000")
    await m.acquire("t1", fs)
    await m.acquire("t2", fs)
    (call,) = env.recorded()
    assert call["argv"][:2] == ["mount", "--background"]  # type: ignore[index]
    assert call["argv"][-2:] == [fs.meta_url, fs.mount_point]  # type: ignore[index]
    assert "--cache-size" in call["argv"] and "--all-squash" in call["argv"]  # type: ignore[operator]
    # the password reached juicefs through its environment only
    assert call["password"] == "s3cret" and "s3cret" not in json.dumps(call["argv"])
    assert "s3cret" not in (env.state / "mounts.json").read_text()
    assert [h.tasks for h in await m.health()] == [2]
    m.release("t1")
    # t2 still uses it: nothing may happen past its idle time (a slow machine can only make
    # this check weaker, never fail it)
    await asyncio.sleep(2 * IDLE_S)
    assert mounted_fstype(fs.mount_point, env.table) == "fuse.juicefs"
    assert [h.tasks for h in await m.health()] == [1]
    m.release("t2")
    await m.acquire("t3", fs)  # used again before its idle time ran out: kept, not remounted
    m.release("t3")
    # done when the manager has forgotten the mount (after juicefs umount left the table)
    await await_until(m.health, 30, "the idle unmount", done=lambda health: health == [])
    assert mounted_fstype(fs.mount_point, env.table) is None
    assert [c["argv"][0] for c in env.recorded()] == ["mount", "umount"]  # type: ignore[index]


async def test_a_restarted_shim_keeps_the_mount_and_counts_its_tasks(env: Env) -> None:
    fs = env.fs()
    first = env.mounts()
    await first.acquire("t1", fs)
    await first.close()
    again = env.mounts()
    again.adopt([("t1", fs.model_copy(update={"meta_password": None}))])
    again.start()
    await again.acquire("t2", fs)
    assert len(env.recorded()) == 1  # not mounted a second time
    (h,) = await again.health()
    assert (h.mounted, h.tasks, h.meta_url) == (True, 2, fs.meta_url)
    await again.close()


async def test_a_mount_nobody_uses_after_a_restart_is_unmounted_when_idle(env: Env) -> None:
    fs = env.fs()
    first = env.mounts()
    await first.acquire("t1", fs)
    await first.close()
    again = env.mounts()
    again.adopt([])  # t1 ended while no shim ran
    again.start()
    await await_until(again.health, 30, "the idle unmount", done=lambda health: health == [])
    assert mounted_fstype(fs.mount_point, env.table) is None
    assert [c["argv"][0] for c in env.recorded()] == ["mount", "umount"]  # type: ignore[index]


@pytest.mark.parametrize(
    ("case", "expect"),
    [
        ("wrong-password", "wrong password for the metadata engine"),
        ("no-fuse", "FUSE is unavailable on this host"),
        ("other-fs", "is busy: a ext4 filesystem is mounted there"),
        ("not-empty", "is busy: the directory is not empty"),
        ("unreachable", "is unreachable from this host"),
    ],
)
async def test_what_cannot_be_mounted_fails_with_one_line_and_counts_nothing(
    env: Env, case: str, expect: str
) -> None:
    fs = env.fs()
    m = env.mounts()
    if case == "wrong-password":
        fs = fs.model_copy(update={"meta_password": "wrong"})
    elif case == "no-fuse":
        env.fuse.unlink()
    elif case == "other-fs":
        with env.table.open("a") as f:
            f.write(f"50 1 8:2 / {fs.mount_point} rw - ext4 /dev/sdb1 rw\n")
    elif case == "not-empty":
        Path(fs.mount_point).mkdir()
        (Path(fs.mount_point) / "data").touch()
    elif case == "unreachable":
        env.port[1].close()
    with pytest.raises(MountFailed) as err:
        await m.acquire("t1", fs)
    assert expect in err.value.detail and "\n" not in err.value.detail, err.value.detail
    assert "wrong" not in err.value.detail.replace("wrong password", "")
    assert await m.health() == []
    m.release("t1")  # the task's submit failed: releasing it changes nothing


async def test_two_volumes_on_one_mount_point_are_refused(env: Env) -> None:
    m = env.mounts()
    await m.acquire("t1", env.fs())
    other = env.fs(meta_url=f"redis://127.0.0.1:{env.port[0]}/2")
    with pytest.raises(MountFailed, match=r"is busy: the volume at redis://127\.0\.0\.1:\d+/1 is"):
        await m.acquire("t2", other)


def test_explain_names_the_cause_and_the_fix() -> None:
    fs = ClusterFs(meta_url="redis://h:6379/1", mount_point="/mnt/x")
    assert "not-formatted" not in explain("<FATAL>: database is not formatted", fs)
    assert "juicefs format redis://h:6379/1" in explain("database is not formatted", fs)
    assert "wants a password" in explain("NOAUTH Authentication required.", fs)
    assert explain("<FATAL>: something odd\n", fs).endswith("<FATAL>: something odd")


async def test_a_shim_started_with_no_cluster_fs_refuses_before_looking(env: Env) -> None:
    m = ClusterMounts(env.state, env.fuse, env.table, lambda: str(env.binary), enabled=False)
    with pytest.raises(MountFailed, match="--no-cluster-fs"):
        await m.acquire("t1", env.fs())
    assert env.recorded() == [] and not Path(env.fs().mount_point).exists()
