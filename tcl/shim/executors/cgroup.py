"""Every process of a process-executor task, found and ended, whatever it did to escape.

A job can leave its process group and session (``setsid``, a daemon that double-forks), and the
runner can be killed before it reaps the job: signalling the wrapper's group then misses them,
and the next task would be handed a GPU they still use. Two ways to find them, best first:

- **a cgroup v2 per task** (``<shim's own cgroup>/tcl-<instance>/<task id>``), joined by the
  wrapper before it starts the runner, so every descendant is in it; ``cgroup.kill`` (Linux 5.14+)
  or SIGKILL of each listed pid ends them all. Used where the shim can create cgroups (root, or a
  delegated subtree such as a systemd unit with ``Delegate=yes``).
- **else a marker in the environment** (``TCL_TASK_MARK=<instance>/<task id>``) that every
  descendant inherits unless it scrubs its environment on purpose; found by reading
  ``/proc/<pid>/environ`` of this user's processes (only when a task ends, never per pass).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

MARK_ENV = "TCL_TASK_MARK"
KILL_ROUNDS = 50  # SIGKILL sweeps (a fork bomb may add processes while we sweep)
_SWEEP_PAUSE_S = 0.02


def _cgroup2_mount(mountinfo: str) -> Path | None:
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        if right.split(" ", 1)[0] == "cgroup2":
            return Path(left.split(" ")[4])
    return None


def _own_cgroup(proc_cgroup: str) -> str | None:
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip()
    return None


class TaskProcesses:
    """Finds and ends every process of one shim instance's tasks."""

    def __init__(self, instance_id: str, cgroup_root: Path | None) -> None:
        self.instance = instance_id
        self.cgroup_root = cgroup_root  # None: environment markers only

    @classmethod
    def discover(cls, instance_id: str) -> TaskProcesses:
        """Use per-task cgroups where they can be created here, else markers."""
        root: Path | None = None
        try:
            mount = _cgroup2_mount(Path("/proc/self/mountinfo").read_text())
            own = _own_cgroup(Path("/proc/self/cgroup").read_text())
            if mount is not None and own is not None:
                root = mount / own.lstrip("/") / f"tcl-{instance_id}"
                # Made and removed again: it exists only while some task has a cgroup in it.
                (root / ".probe").mkdir(parents=True, exist_ok=True)
                (root / ".probe").rmdir()
                _rmdir_quietly(root)
        except OSError as e:
            log.info("no per-task cgroups (%s): tracking task processes by marker", e)
            root = None
        return cls(instance_id, root)

    @property
    def uses_cgroups(self) -> bool:
        return self.cgroup_root is not None

    def mark(self, task_id: str) -> str:
        return f"{self.instance}/{task_id}"

    def prepare(self, task_id: str) -> Path | None:
        """The cgroup the task's wrapper joins (created), or None without cgroups."""
        if self.cgroup_root is None:
            return None
        path = self.cgroup_root / task_id
        for _ in range(3):  # another task's release may remove the (empty) root in between
            with contextlib.suppress(FileNotFoundError):
                path.mkdir(parents=True, exist_ok=True)
                return path
        path.mkdir(parents=True, exist_ok=True)
        return path

    def pids(self, task_id: str) -> set[int]:
        """Every live process of the task."""
        if self.cgroup_root is not None:
            try:
                text = (self.cgroup_root / task_id / "cgroup.procs").read_text()
            except FileNotFoundError:
                return set()
            return {int(p) for p in text.split()}
        return set(_marked_pids(f"{MARK_ENV}={self.mark(task_id)}".encode()))

    def kill(self, task_id: str, spare: Iterable[int] = ()) -> int:
        """SIGKILL every process of the task but ``spare``; returns how many were signalled.

        Blocking (a few ms; up to ~1 s for a fork bomb): call it from a thread."""
        spared = set(spare)
        group = self.cgroup_root / task_id if self.cgroup_root is not None else None
        if group is not None and not spared and (group / "cgroup.kill").exists():
            count = len(self.pids(task_id))
            with contextlib.suppress(FileNotFoundError):
                (group / "cgroup.kill").write_text("1")
            self._wait_empty(task_id)
            return count
        signalled = 0
        for _ in range(KILL_ROUNDS):
            victims = self.pids(task_id) - spared
            if not victims:
                break
            for pid in victims:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    signalled += 1
            time.sleep(_SWEEP_PAUSE_S)
        return signalled

    def _wait_empty(self, task_id: str) -> None:
        for _ in range(KILL_ROUNDS):
            if not self.pids(task_id):
                return
            time.sleep(_SWEEP_PAUSE_S)

    def release(self, task_id: str) -> int:
        """End the task's processes and remove its cgroup (idempotent); returns how many
        processes were signalled."""
        killed = self.kill(task_id)
        if self.cgroup_root is not None:
            _rmdir_quietly(self.cgroup_root / task_id)
            _rmdir_quietly(self.cgroup_root)  # the last task's: leave no empty cgroups behind
        return killed


def _rmdir_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):  # gone already, or still holding a task or a process
        path.rmdir()


def _marked_pids(needle: bytes) -> Iterable[int]:
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                env = f.read()
        except OSError:  # gone, or another user's
            continue
        if needle in env.split(b"\0"):
            yield int(entry.name)
