"""Pod networking: one bridge per emulator, one network namespace (own IP, own /etc/hosts) per pod.

Like scripts/testbed/ssh-up.sh: a veth pair per netns, its host end on the bridge, the
gateway address on the bridge, and an iptables FORWARD accept rule for bridge-to-bridge
frames (Docker's FORWARD policy DROP with br_netfilter would drop them). ``ip netns exec``
bind-mounts ``/etc/netns/<ns>/hosts`` over ``/etc/hosts``, so each pod sees the hosts file
written for it. Everything made here is recorded and removed by ``teardown``.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
from pathlib import Path

from tests.k8semu.config import Network


def _ip(*args: str, check: bool = True) -> None:
    subprocess.run(["ip", *args], check=check, capture_output=True)


class PodNetwork:
    def __init__(self, net: Network) -> None:
        self.net = net
        # names its netns (k8semu-<pid>-<tag>-<n>) and veths: unique per emulator, and the
        # pid tells a later emulator whether their owner is gone
        self.tag = f"{os.getpid()}-{secrets.token_hex(1)}"
        self._veth_tag = f"k{os.getpid():06x}{self.tag[-2:]}"
        self._lock = threading.Lock()
        self._claims = Path("/run/k8semu") / net.bridge
        self._netns: dict[str, tuple[str, int]] = {}  # netns -> (veth, host octet)
        self._counter = 0
        self._last = 9  # the last host octet handed out
        self._rule = ["FORWARD", "-i", net.bridge, "-o", net.bridge, "-j", "ACCEPT"]
        self._bridge_made = False
        self._added_rule = False

    @property
    def gateway(self) -> str:
        return f"{self.net.prefix}.1"

    def _sweep(self) -> None:
        """Remove the netns (and hosts files) of emulators whose process is gone (killed)."""
        listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        for line in listing.splitlines():
            m = re.match(r"(k8semu-(\d+)-\S+)", line)
            if m and not _alive(int(m.group(2))):
                # its pods' processes first (orphans of the dead emulator), then the netns
                pids = subprocess.run(
                    ["ip", "netns", "pids", m.group(1)], capture_output=True, text=True
                ).stdout.split()
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
                _ip("netns", "del", m.group(1), check=False)  # its veth pair goes with it
                shutil.rmtree(Path("/etc/netns") / m.group(1), ignore_errors=True)
        for claim in self._claims.glob("*") if self._claims.is_dir() else []:
            with contextlib.suppress(ValueError, OSError):
                if not _alive(int(claim.read_text() or "0")):
                    claim.unlink()

    def setup(self) -> None:
        self._sweep()
        br = self.net.bridge
        probe = subprocess.run(["ip", "link", "show", br], capture_output=True)
        if probe.returncode != 0:
            _ip("link", "add", br, "type", "bridge")
            self._bridge_made = True
        elif not self._attached():
            # nothing on it: a killed emulator's leftover, ours to remove when we stop
            self._bridge_made = True
        _ip("addr", "replace", f"{self.gateway}/24", "dev", br)
        _ip("link", "set", br, "up")
        if subprocess.run(["iptables", "-C", *self._rule], capture_output=True).returncode:
            subprocess.run(["iptables", "-I", *self._rule], check=True, capture_output=True)
            self._added_rule = True
        else:
            self._added_rule = self._bridge_made

    def _claim(self) -> int:
        """A free host octet, claimed by an ``O_EXCL`` file holding our pid, so emulators in
        other processes sharing the bridge never pick the same address (a dead owner's claim
        is taken over)."""
        self._claims.mkdir(parents=True, exist_ok=True)
        # from the last one handed out, as host-local IPAM does: a new pod rarely gets the
        # address a deleted one just had
        start = self._last + 1 - 10
        for octet in [10 + (start + k) % 240 for k in range(240)]:
            f = self._claims / str(octet)
            try:
                fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                try:
                    owner = int(f.read_text() or "0")
                    os.kill(owner, 0)
                    continue
                except (ValueError, ProcessLookupError, FileNotFoundError):
                    f.unlink(missing_ok=True)  # a dead process's claim
                    try:
                        fd = os.open(f, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                    except FileExistsError:
                        continue
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
            self._last = octet
            return octet
        raise RuntimeError(f"no free address left on {self.net.bridge}")

    def add(self) -> tuple[str, str]:
        """A new netns on the bridge: ``(netns name, IP)``."""
        with self._lock:
            octet = self._claim()
            self._counter += 1
            ns = f"k8semu-{self.tag}-{self._counter}"
            veth = f"{self._veth_tag}{self._counter % 0x10000:04x}"  # ≤ 15 characters
            self._netns[ns] = (veth, octet)
        ip = f"{self.net.prefix}.{octet}"
        _ip("netns", "add", ns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "set", veth, "master", self.net.bridge, "up")
        _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "route", "add", "default", "via", self.gateway)
        return ns, ip

    def write_hosts(self, ns: str, entries: list[tuple[str, str]]) -> None:
        """``/etc/netns/<ns>/hosts``: localhost plus ``ip name…`` lines (kubelet's format)."""
        lines = [
            "# Kubernetes-managed hosts file.",
            "127.0.0.1\tlocalhost",
            "::1\tlocalhost ip6-localhost ip6-loopback",
        ]
        lines += [f"{ip}\t{names}" for ip, names in entries]
        d = Path("/etc/netns") / ns
        d.mkdir(parents=True, exist_ok=True)
        # in place, not by rename: a running pod has this very inode bind-mounted on /etc/hosts
        (d / "hosts").write_text("\n".join(lines) + "\n")

    def remove(self, ns: str) -> None:
        with self._lock:
            veth, octet = self._netns.pop(ns, ("", 0))
            if octet:
                (self._claims / str(octet)).unlink(missing_ok=True)
        if veth:
            _ip("link", "del", veth, check=False)
        _ip("netns", "del", ns, check=False)
        shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)

    def _attached(self) -> bool:
        ports = Path(f"/sys/class/net/{self.net.bridge}/brif")
        return ports.exists() and any(ports.iterdir())

    def teardown(self) -> None:
        for ns in list(self._netns):
            self.remove(ns)
        # another emulator may still use the bridge: remove it only when nothing is attached
        if self._bridge_made and not self._attached():
            _ip("link", "del", self.net.bridge, check=False)
            if self._added_rule:
                subprocess.run(["iptables", "-D", *self._rule], capture_output=True)
            with contextlib.suppress(OSError):
                self._claims.rmdir()
                self._claims.parent.rmdir()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
