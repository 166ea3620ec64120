"""The cluster's root on a SLURM node: mounted by the first job, counted per job, unmounted by the
last one out; what juicefs gets (argv, META_PASSWORD) and the one line when it fails.

No real FUSE: a fake ``juicefs`` records its argv and environment and adds or removes its line
in a fake mount table (``NodeMount`` reads that instead of /proc/self/mountinfo).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tcl.common.api import ClusterFs
from tcl.common.errors import MountFailed
from tcl.runner import nodemount
from tcl.runner.api import JobSpec
from tcl.runner.batch import CLUSTER_FS_KEY, load_spec, run_batch
from tcl.runner.errors import InvalidSpec
from tcl.runner.events import EventLog
from tcl.runner.nodemount import NodeMount
from tcl.runner.service import RunnerConfig

PASSWORD = "pw-s3cret"
PY = sys.executable

FAKE_JUICEFS = r"""#!/bin/bash
# records: one line per call, the argv NUL-separated, then META_PASSWORD
{ printf '%s\0' "$@"; printf 'META_PASSWORD=%s\n' "${META_PASSWORD-<unset>}"; } >> "$FAKE_LOG"
case "$1" in
  mount)
    if [ -n "${FAKE_FAIL-}" ]; then echo "$FAKE_FAIL"; exit 1; fi
    mp="${@: -1}"; mp="${mp// /\\040}"  # the mount table escapes spaces
    echo "36 35 0:99 / $mp rw,relatime - fuse.juicefs JuiceFS:vol rw" >> "$FAKE_MOUNTINFO" ;;
  umount)
    mp="${@: -1}"; mp="${mp// /\\040}"
    grep -vF " $mp rw,relatime - fuse.juicefs" "$FAKE_MOUNTINFO" > "$FAKE_MOUNTINFO.new" || true
    mv "$FAKE_MOUNTINFO.new" "$FAKE_MOUNTINFO" ;;
esac
"""


def escaped(path: str) -> str:
    """``path`` as the mount table writes it."""
    return path.replace(" ", "\\040")


class Node:
    """A node's fake juicefs, mount table and FUSE device, and its calls to juicefs."""

    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch, port: int) -> None:
        self.tmp = tmp
        self.binary = tmp / "bin" / "juicefs"
        self.binary.parent.mkdir()
        self.binary.write_text(FAKE_JUICEFS)
        self.binary.chmod(0o755)
        self.log = tmp / "juicefs-calls"
        self.log.touch()
        self.mountinfo = tmp / "mountinfo"
        self.mountinfo.write_text("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n")
        self.fuse = tmp / "fuse"
        self.fuse.touch()
        self.state = tmp / "node-state"
        monkeypatch.setenv("FAKE_LOG", str(self.log))
        monkeypatch.setenv("FAKE_MOUNTINFO", str(self.mountinfo))
        monkeypatch.setattr(nodemount, "juicefs_binary", lambda fix="": str(self.binary))
        monkeypatch.setattr(nodemount, "MOUNTINFO", self.mountinfo)
        monkeypatch.setattr(nodemount, "FUSE_DEVICE", self.fuse)
        self.fs = ClusterFs(
            meta_url=f"redis://127.0.0.1:{port}/1",
            meta_password=PASSWORD,
            mount_point=str(tmp / "cluster root"),
            cache_size_mib=1024,
        )

    def mount(self, key: str, fs: ClusterFs | None = None) -> NodeMount:
        return NodeMount(fs or self.fs, self.state, key)

    def calls(self) -> list[tuple[list[str], str]]:
        out = []
        text = self.log.read_text()
        for line in text.splitlines():
            *argv, env = line.split("\0")
            out.append((argv, env))
        return out

    def mounted(self) -> bool:
        return f" {escaped(self.fs.mount_point)} " in self.mountinfo.read_text()


@pytest.fixture
def meta_port() -> Iterator[int]:
    """A port that takes connections: the metadata engine's, for the preflight's probe."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, meta_port: int) -> Node:
    return Node(tmp_path, monkeypatch, meta_port)


def test_the_first_job_mounts_the_last_one_out_unmounts(node: Node) -> None:
    a, b = node.mount("1.0.100"), node.mount("2.0.200")
    a.acquire()
    assert node.mounted()
    b.acquire()  # shared: not mounted twice
    ((argv, env),) = node.calls()
    log_file = str(node.state / "juicefs" / "tmp")  # the log's name comes from the mount point
    assert argv[:4] == ["mount", "--background", "--log", argv[3]] and argv[3].startswith(log_file)
    assert argv[4:] == ["--cache-size", "1024", node.fs.meta_url, node.fs.mount_point]
    assert env == f"META_PASSWORD={PASSWORD}" and PASSWORD not in " ".join(argv)
    for f in node.state.rglob("*"):  # what the node keeps names no password
        assert not f.is_file() or PASSWORD not in f.read_text(errors="replace")
    assert stat.S_IMODE(node.state.stat().st_mode) == 0o700

    a.release()
    assert node.mounted() and len(node.calls()) == 1  # b still uses it
    b.release()
    assert not node.mounted()
    assert node.calls()[-1][0] == ["umount", node.fs.mount_point]
    assert not list((node.state).glob("*.json"))  # nothing recorded as mounted any more


def test_a_dead_runners_marker_does_not_keep_the_mount(node: Node) -> None:
    a = node.mount("1.0.100")
    a.acquire()
    # a runner SIGKILLed after SLURM's KillWait: its marker stays, nobody holds its lock
    (a.users / "9.0.999").touch()
    a.release()
    assert not node.mounted() and not (a.users / "9.0.999").exists()


def test_a_live_runner_in_another_process_keeps_it(node: Node) -> None:
    a = node.mount("1.0.100")
    a.acquire()
    other = os.open(a.users / "2.0.200", os.O_CREAT | os.O_WRONLY, 0o600)
    import fcntl

    fcntl.flock(other, fcntl.LOCK_EX)  # as a second runner holds its marker
    try:
        a.release()
        assert node.mounted()
    finally:
        os.close(other)


def test_null_idle_unmount_keeps_it_mounted_for_the_next_job(node: Node) -> None:
    fs = node.fs.model_copy(update={"unmount_after_idle_s": None})
    a = node.mount("1.0.100", fs)
    a.acquire()
    a.release()
    assert node.mounted()
    b = node.mount("2.0.200", fs)
    b.acquire()  # found mounted (by tcl, same volume): used as it is
    assert len(node.calls()) == 1


def test_a_failed_mount_is_one_line_with_the_fix_and_counts_nobody(
    node: Node, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_FAIL", "2026/11/24 <FATAL>: Meta ERR WRONGPASS invalid password")
    a = node.mount("1.0.100")
    with pytest.raises(MountFailed) as e:
        a.acquire()
    assert "wrong password" in e.value.detail and "`mount:` URL" in e.value.detail
    assert "\n" not in e.value.detail and PASSWORD not in e.value.detail
    assert not list(a.users.iterdir()) and not list(node.state.glob("*.json"))
    a.release()  # the runner's finally: nothing to do
    assert [c[0][0] for c in node.calls()] == ["mount"]


def test_another_filesystem_at_the_root_is_refused_before_juicefs_runs(node: Node) -> None:
    with node.mountinfo.open("a") as f:
        f.write(f"40 22 0:50 / {escaped(node.fs.mount_point)} rw - nfs4 x rw\n")
    with pytest.raises(MountFailed, match="busy: a nfs4 filesystem is mounted there"):
        node.mount("1.0.100").acquire()
    assert node.calls() == []


def test_an_unreachable_metadata_engine_is_named(node: Node) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        fs = node.fs.model_copy(update={"meta_url": f"redis://127.0.0.1:{port}/1"})
        with pytest.raises(MountFailed, match="unreachable from this host"):
            node.mount("1.0.100", fs).acquire()
    assert node.calls() == []


def test_a_root_mounted_by_someone_else_is_used_and_left_mounted(node: Node) -> None:
    with node.mountinfo.open("a") as f:
        mp = escaped(node.fs.mount_point)
        f.write(f"41 22 0:51 / {mp} rw,relatime - fuse.juicefs JuiceFS:vol rw\n")
    a = node.mount("1.0.100")
    a.acquire()
    a.release()
    assert node.calls() == [] and "41 22 0:51" in node.mountinfo.read_text()


# tcl-runner batch with a spec file that has cluster_fs -------------------------------------------


def batch_spec(tmp: Path, fs: ClusterFs, argv: list[str], mode: int = 0o600) -> Path:
    """The spec file as the SLURM backend writes it: the JobSpec, cluster_fs beside it."""
    body = JobSpec(run_id="r1", argv=argv).model_dump(mode="json")
    body[CLUSTER_FS_KEY] = fs.model_dump(mode="json")
    path = tmp / "spec.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(body) + "\n")
    os.chmod(path, mode)
    return path


def test_batch_mounts_the_root_before_the_job_and_unmounts_after(node: Node) -> None:
    seen = node.tmp / "seen"
    job = (
        "import os, sys; t = open(sys.argv[1]).read(); "
        "open(sys.argv[2], 'w').write(str(sys.argv[3] in t) + ' ' + "
        "str('META_PASSWORD' in os.environ))"
    )
    mp = escaped(node.fs.mount_point)
    spec = batch_spec(node.tmp, node.fs, [PY, "-c", job, str(node.mountinfo), str(seen), mp])
    code = run_batch(RunnerConfig(state_dir=node.tmp / "state"), spec, None)
    assert code == 0
    assert seen.read_text() == "True False"  # mounted while it ran; the password not its
    assert not node.mounted()
    assert [c[0][0] for c in node.calls()] == ["mount", "umount"]


def test_batch_whose_mount_fails_starts_nothing_and_says_why(
    node: Node, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_FAIL", "<FATAL>: fuse: device not found, try 'modprobe fuse' first")
    monkeypatch.setenv("SLURMD_NODENAME", "gpu-node-7")
    ran = node.tmp / "ran"
    spec = batch_spec(node.tmp, node.fs, ["touch", str(ran)])
    state = node.tmp / "state"
    code = run_batch(RunnerConfig(state_dir=state), spec, None)
    assert code == 127 and not ran.exists()
    status = json.loads((state / "status.json").read_text())
    assert (status["state"], status["exit_code"]) == ("failed", 127)
    events, _ = EventLog(state / "events").read(0)
    (line,) = [e.data for e in events if e.data and "node gpu-node-7" in e.data]
    assert "FUSE is unavailable" in line and "modprobe fuse" in line and line.count("\n") == 1
    assert "node gpu-node-7: FUSE is unavailable" in capsys.readouterr().err


def test_a_spec_file_with_the_mount_password_must_be_private(node: Node) -> None:
    spec = batch_spec(node.tmp, node.fs, ["true"], mode=0o644)
    with pytest.raises(InvalidSpec, match="0644 lets other users read"):
        load_spec(spec)
    os.chmod(spec, 0o600)
    loaded = load_spec(spec)
    assert loaded.cluster_fs == node.fs and loaded.cluster_fs.meta_password == PASSWORD
