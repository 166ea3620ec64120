"""Cluster filesystems (JuiceFS) shared by a host's tasks.

A task whose spec has ``cluster_fs`` gets its cluster's root mounted before it is allocated
anything; the mount is counted by task (one mount per mount point, however many tasks use it)
and unmounted ``unmount_after_idle_s`` after the last of them ended. ``juicefs mount -d`` runs
on its own, so a mount outlives the shim: a restarted shim finds it in the mount table and
counts the tasks it still has (``adopt``). The health report says whether each mount answers.

The metadata engine's password reaches ``juicefs`` only through its environment
(``META_PASSWORD``): never its command line, a file, the task's record or a log. What is
mounted where (without passwords) is kept in ``mounts.json``, versioned, written atomically.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

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
from tcl.common import errors as node_errors
from tcl.shim.api import ClusterFs, MountHealth
from tcl.shim.errors import MountFailed

log = logging.getLogger(__name__)

STATE_VERSION = 1


class ClusterMounts:
    """The host's cluster filesystems and the tasks that use each."""

    def __init__(
        self,
        state_dir: Path,
        fuse_device: Path = FUSE_DEVICE,
        mountinfo: Path = Path("/proc/self/mountinfo"),
        binary: Callable[[], str] = juicefs_binary,
        enabled: bool = True,
    ) -> None:
        self.state_file = state_dir / "mounts.json"
        self.log_dir = state_dir / "juicefs"
        self.fuse_device = fuse_device
        self.mountinfo = mountinfo
        self.binary = binary
        self.enabled = enabled
        self._mounted: dict[str, ClusterFs] = self._load()  # mount point -> spec (no password)
        self._users: dict[str, set[str]] = {}  # mount point -> live task ids
        self._locks: dict[str, asyncio.Lock] = {}
        self._idle: dict[str, asyncio.Task[None]] = {}

    # state ------------------------------------------------------------------------------------

    def _load(self) -> dict[str, ClusterFs]:
        try:
            data = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            log.warning("ignoring %s: %s", self.state_file, e)
            return {}
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            log.warning("ignoring %s: not version %d", self.state_file, STATE_VERSION)
            return {}
        return {mp: ClusterFs.model_validate(fs) for mp, fs in data.get("mounts", {}).items()}

    def _save(self) -> None:
        mounts = {mp: fs.model_dump(mode="json") for mp, fs in self._mounted.items()}
        body = json.dumps({"version": STATE_VERSION, "mounts": mounts}, indent=1)
        write_atomic(self.state_file, body.encode(), 0o600)

    def adopt(self, tasks: Iterable[tuple[str, ClusterFs]]) -> None:
        """At start: count the live tasks of the mounts that survived the last shim."""
        for task_id, fs in tasks:
            if fs.mount_point in self._mounted:
                self._users.setdefault(fs.mount_point, set()).add(task_id)

    def start(self) -> None:
        """Within the loop: mounts nobody uses any more wait for their idle unmount."""
        for mp in list(self._mounted):
            if not self._users.get(mp):
                self._schedule_idle(mp)

    async def _fstype(self, mp: str) -> str | None:
        return await asyncio.to_thread(mounted_fstype, mp, self.mountinfo)

    # tasks --------------------------------------------------------------------------------------

    async def acquire(self, task_id: str, fs: ClusterFs) -> None:
        """Mount ``fs`` unless it is mounted, and count ``task_id`` as its user."""
        if not self.enabled:
            raise MountFailed(
                "this host's shim mounts no cluster filesystems (started with --no-cluster-fs): "
                "mount the cluster's root on it yourself and drop `mount:`, or restart the shim"
            )
        mp = fs.mount_point
        lock = self._locks.setdefault(mp, asyncio.Lock())
        async with lock:
            idle = self._idle.pop(mp, None)
            if idle is not None:
                idle.cancel()
            try:
                await self._ensure(fs)
            except node_errors.MountFailed as e:  # tcl.clusterfs_node's, in the shim's terms
                raise MountFailed(e.detail) from e
            self._users.setdefault(mp, set()).add(task_id)

    def release(self, task_id: str) -> None:
        """``task_id`` ended: a mount it was the last user of waits for its idle unmount."""
        for mp, users in self._users.items():
            if task_id in users:
                users.discard(task_id)
                if not users:
                    self._schedule_idle(mp)

    async def _ensure(self, fs: ClusterFs) -> None:
        mp = fs.mount_point
        fstype = await self._fstype(mp)
        known = self._mounted.get(mp)
        if fstype == JUICEFS_FSTYPE and known is not None:
            if known.meta_url != fs.meta_url:
                raise other_volume_error(mp, known.meta_url, fs.meta_url)
            if await asyncio.to_thread(answers, mp):
                return
            await self._unmount(mp, lazy=True)  # its daemon died: mount it again
        elif fstype is not None:
            raise busy_error(mp, fstype)
        await asyncio.to_thread(preflight, fs, self.log_dir, self.fuse_device)
        await self._mount(fs)

    async def _mount(self, fs: ClusterFs) -> None:
        binary = self.binary()
        env = mount_env(fs)
        proc = await asyncio.create_subprocess_exec(
            *mount_argv(binary, fs, self.log_dir / log_name(fs.mount_point)),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), MOUNT_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise MountFailed(
                f"juicefs did not mount {fs.meta_url} at {fs.mount_point} within "
                f"{MOUNT_TIMEOUT_S:.0f} s"
            ) from None
        output = out.decode(errors="replace")
        if proc.returncode != 0 or await self._fstype(fs.mount_point) is None:
            raise MountFailed(explain(output, fs))
        self._mounted[fs.mount_point] = fs.model_copy(update={"meta_password": None})
        await asyncio.to_thread(self._save)
        log.info("mounted %s at %s", fs.meta_url, fs.mount_point)

    # idle unmount -----------------------------------------------------------------------------

    def _schedule_idle(self, mp: str) -> None:
        fs = self._mounted.get(mp)
        if fs is None or fs.unmount_after_idle_s is None or mp in self._idle:
            return
        self._idle[mp] = asyncio.create_task(self._unmount_when_idle(mp, fs.unmount_after_idle_s))

    async def _unmount_when_idle(self, mp: str, after_s: float) -> None:
        await asyncio.sleep(after_s)
        lock = self._locks.setdefault(mp, asyncio.Lock())
        async with lock:
            self._idle.pop(mp, None)
            if self._users.get(mp):
                return
            try:
                await self._unmount(mp)
            except (MountFailed, node_errors.MountFailed) as e:
                log.warning("%s", e.detail)  # busy (a shell sits in it): tried again later
                self._schedule_idle(mp)

    async def _unmount(self, mp: str, lazy: bool = False) -> None:
        if await self._fstype(mp) == JUICEFS_FSTYPE:
            argv = unmount_argv(self.binary(), mp, force=lazy)
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            try:
                out, _ = await asyncio.wait_for(proc.communicate(), UNMOUNT_TIMEOUT_S)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                raise MountFailed(f"unmounting {mp} took over {UNMOUNT_TIMEOUT_S:.0f} s") from None
            if proc.returncode != 0:
                last = out.decode(errors="replace").strip().splitlines()[-1:] or ["?"]
                raise MountFailed(f"could not unmount {mp}: {last[0][-300:]}")
            log.info("unmounted %s", mp)
        self._mounted.pop(mp, None)
        self._users.pop(mp, None)
        await asyncio.to_thread(self._save)

    # health -----------------------------------------------------------------------------------

    async def health(self) -> list[MountHealth]:
        out = []
        for mp, fs in sorted(self._mounted.items()):
            mounted = await self._fstype(mp) == JUICEFS_FSTYPE
            error = ""
            if not mounted:
                error = "not mounted (its juicefs process is gone); the next task mounts it again"
            elif not await asyncio.to_thread(answers, mp):
                mounted, error = False, "mounted but not answering (its juicefs process died?)"
            out.append(
                MountHealth(
                    mount_point=mp,
                    meta_url=fs.meta_url,
                    mounted=mounted,
                    tasks=len(self._users.get(mp, ())),
                    error=error,
                )
            )
        return out

    async def close(self) -> None:
        """The shim stops: the mounts stay (its tasks go on); idle timers start anew next time."""
        for t in self._idle.values():
            t.cancel()
        for t in self._idle.values():
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._idle.clear()
