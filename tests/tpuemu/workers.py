"""The worker pool: testbed sshd hosts that play a TPU node's worker VMs.

A node takes W free hosts; its ``networkEndpoints`` are their addresses. What a VM does that
the emulator reproduces on a host:

- first boot: ``metadata["startup-script"]`` runs as root (``ssh … bash -s``, the script on
  stdin), in the background, output kept in a log file per worker;
- preemption: ``metadata["shutdown-script"]`` runs the same way, with a grace period;
- death (delete, preemption): every process in the host's network namespace is SIGKILLed
  except the host's sshd daemon itself (its pid file), so a later node can reuse the host.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WorkerHost:
    """One host of the pool.

    ``netns``: its network namespace (``infra-h1``); None for a host that only lends an address
    (API tests without SSH). ``sshd_pid_file``: the pid file of its sshd, spared by a kill.
    ``external_ip``: ``accessConfig.externalIp`` (default: ``ip``).
    """

    ip: str
    netns: str | None = None
    sshd_pid_file: Path | None = None
    external_ip: str | None = None


def hosts_of_testbed(ssh_dir: Path, count: int) -> list[WorkerHost]:
    """The netns hosts ``infra-h1..count`` of scripts/testbed/ssh-up.sh (``ssh_dir``: its
    ``$BASE/ssh``, with the sshd pid files)."""
    return [
        WorkerHost(f"10.213.0.{10 + i}", f"infra-h{i}", ssh_dir / f"sshd_h{i}.pid")
        for i in range(1, count + 1)
    ]


class WorkerPool:
    """Free/taken bookkeeping of the hosts (used from the emulator's event loop only)."""

    def __init__(self, hosts: Sequence[WorkerHost]) -> None:
        self.hosts = list(hosts)
        self._owner: dict[int, str] = {}  # host index -> node name

    def free(self) -> int:
        return len(self.hosts) - len(self._owner)

    def take(self, node: str, count: int) -> list[WorkerHost] | None:
        """``count`` free hosts for ``node``, or None when the pool has fewer."""
        idle = [i for i in range(len(self.hosts)) if i not in self._owner]
        if len(idle) < count:
            return None
        for i in idle[:count]:
            self._owner[i] = node
        return [self.hosts[i] for i in idle[:count]]

    def release(self, node: str) -> None:
        for i in [i for i, owner in self._owner.items() if owner == node]:
            del self._owner[i]


@dataclass(frozen=True)
class SshAccess:
    """How the emulator reaches the hosts as root: an ssh_config with User, key, known_hosts."""

    config: Path

    def argv(self, host: WorkerHost, *command: str) -> list[str]:
        return ["ssh", "-F", str(self.config), "-o", "BatchMode=yes", host.ip, *command]


async def run_script(
    ssh: SshAccess, host: WorkerHost, script: str, log: Path, timeout_s: float | None = None
) -> int:
    """Run ``script`` as root on ``host`` (``bash -s``), appending its output to ``log``.

    Returns its exit status (-9 when ``timeout_s`` ran out and the ssh client was killed).
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {host.ip}\n".encode())
        out.flush()
        proc = await asyncio.create_subprocess_exec(
            *ssh.argv(host, "bash", "-s"),
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            await asyncio.wait_for(proc.communicate(script.encode()), timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return -9
        rc = proc.returncode
        out.write(f"--- exit {rc}\n".encode())
    return -1 if rc is None else rc


def kill_host(host: WorkerHost, attempts: int = 20) -> int:
    """SIGKILL every process in ``host``'s netns but its sshd daemon, as a VM's death does.

    Repeats until none is left (a dying session may still fork); returns how many were killed.
    """
    if host.netns is None:
        return 0
    keep = _sshd_pid(host)
    killed = 0
    for _ in range(attempts):
        out = subprocess.run(
            ["ip", "netns", "pids", host.netns], capture_output=True, text=True, check=False
        )
        # SSH sessions in flight are spared: on a real VM they would just drop, but here every
        # host shares one filesystem, and a session killed mid-way can leave a shared lock
        # behind (root's .bashrc runs `pyenv rehash`, whose lock then stalls every later SSH
        # command for 60 s). What a VM runs lives outside them (daemons, their children).
        pids = [
            int(p)
            for p in out.stdout.split()
            if p.isdigit() and int(p) != keep and not _under(int(p), keep)
        ]
        if not pids:
            return killed
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        time.sleep(0.05)
    return killed


def _under(pid: int, ancestor: int | None) -> bool:
    """Whether ``ancestor`` is a parent, grandparent, ... of ``pid``."""
    while ancestor is not None and pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid == ancestor:
            return True
    return False


def _sshd_pid(host: WorkerHost) -> int | None:
    if host.sshd_pid_file is None:
        return None
    try:
        return int(host.sshd_pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
