"""What a job leaves running does not outlive it, wherever the runner runs.

A daemon the job starts (``setsid``, a double fork) leaves the job's process group, so the
group's SIGKILL at the job's end misses it. The runner makes itself a *child subreaper*
(``PR_SET_CHILD_SUBREAPER``; in a container it is PID 1, which is one already): orphans of the
job are then reparented to the runner instead of to init, and :func:`end_orphans` ends every
descendant left once the job is over, sparing the container's sshd and its sessions. The shim
does the same from outside with a cgroup per task; this covers docker and batch (SLURM,
Kubernetes) runners, where the shim has no such handle.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
SSHD_PID_FILE = Path("/run/sshd.pid")  # written by the image's entrypoint (runner-entrypoint.sh)


def become_subreaper() -> bool:
    """Adopt the job's orphans (Linux); False where the kernel or libc says no."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses, so split after it.
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def _tree(root: int, children: dict[int, list[int]]) -> set[int]:
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def end_orphans() -> int:
    """SIGKILL every descendant of this process but the sshd tree; returns how many."""
    children = _children_map()
    spare: set[int] = set()
    with contextlib.suppress(OSError, ValueError):
        sshd = int(SSHD_PID_FILE.read_text().split()[0])
        spare = {sshd} | _tree(sshd, children)
    victims = _tree(os.getpid(), children) - spare
    for pid in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for pid in victims:  # they are our children now: reap them, no zombies left behind
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, 0)
    return len(victims)
