"""The kubelet's part: run a pod's one container as a local process in its own namespaces.

A pod runs as ``ip netns exec <ns> unshare -m -u --propagation private -- bash -c <setup>``:
its network namespace (own IP, ``/etc/hosts`` from ``/etc/netns/<ns>/hosts``), its own mount
namespace where its volumes are bind-mounted, its own UTS namespace (hostname = pod name).
The setup script then ``exec``s the container's ``command`` + ``args`` (``$(VAR)`` expanded as
Kubernetes does) under exactly the container's environment, so the pod's pid is the
process's pid (``nsenter -t`` enters it for exec). The image is ignored: the command runs on
the host's filesystem, with ``bin_dir`` first on PATH.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

START_TIMEOUT_S = 30.0  # the most a pod's setup (hostname, bind mounts) may take
IP = "/usr/sbin/ip" if Path("/usr/sbin/ip").exists() else "/sbin/ip"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)")


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: known names replaced, ``$$`` → ``$``, unknown kept."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return _REF.sub(sub, text)


def field_ref(pod: dict[str, Any], path: str) -> str:
    meta, status, spec = pod["metadata"], pod.get("status", {}), pod["spec"]
    table = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "status.podIP": status.get("podIP", ""),
        "status.hostIP": status.get("hostIP", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
    }
    m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if m:
        return str((meta.get(m.group(1)) or {}).get(m.group(2), ""))
    return str(table.get(path, ""))


def container_env(
    pod: dict[str, Any], container: dict[str, Any], secrets: dict[str, dict[str, str]]
) -> dict[str, str]:
    """The container's environment: its ``env`` list in order, each value expanded against
    the ones before it; ``valueFrom`` fieldRef and secretKeyRef resolved."""
    env: dict[str, str] = {}
    for item in container.get("env") or []:
        name = item["name"]
        if "value" in item:
            env[name] = expand(str(item["value"]), env)
            continue
        src = item.get("valueFrom") or {}
        if "fieldRef" in src:
            env[name] = field_ref(pod, src["fieldRef"]["fieldPath"])
        elif "secretKeyRef" in src:
            ref = src["secretKeyRef"]
            env[name] = secrets.get(ref["name"], {}).get(ref["key"], "")
        else:
            env[name] = ""
    return env


@dataclass
class PodProcess:
    """A pod's running container: its process, namespaces and log."""

    netns: str
    ip: str
    log: Path
    proc: subprocess.Popen[bytes]
    env: dict[str, str]
    workdir: str
    started_at: float = field(default_factory=time.time)
    # the container's output, line by line, with the time each line arrived (for sinceSeconds)
    lines: list[tuple[float, bytes]] = field(default_factory=list)
    pump: threading.Thread | None = None

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        partial = b""
        with self.log.open("ab") as out:
            for chunk in iter(lambda: os.read(fd, 65536), b""):
                out.write(chunk)
                out.flush()
                data = partial + chunk
                *whole, partial = data.split(b"\n")
                t = time.time()
                self.lines.extend((t, line + b"\n") for line in whole)
        if partial:
            self.lines.append((time.time(), partial))
        self.proc.stdout.close()

    def output_done(self, timeout_s: float) -> bool:
        """Wait (≤ ``timeout_s``) until the output pipe is drained."""
        if self.pump is not None:
            self.pump.join(timeout_s)
            return not self.pump.is_alive()
        return True

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exit_code(self) -> int | None:
        """None while running; signals as container runtimes report them (128 + signal)."""
        rc = self.proc.poll()
        if rc is None:
            return None
        return 128 - rc if rc < 0 else rc

    def kill_leftovers(self) -> None:
        """SIGKILL what the exited main process left in its process group."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)

    def stop(self, grace_s: float) -> int:
        """SIGTERM to the process group, ``grace_s``, then SIGKILL; the exit code."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout=grace_s if sig == signal.SIGTERM else 10)
                break
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):  # children left behind in its group
            os.killpg(self.proc.pid, signal.SIGKILL)
        code = self.exit_code()
        return 137 if code is None else code


def _setup_script(
    pod: dict[str, Any],
    mounts: list[tuple[Path, str]],
    workdir: str,
    made_dirs: list[Path],
    started_fd: int,
) -> str:
    """The shell run first inside the pod's namespaces: hostname, bind mounts, cd, exec."""
    lines = [f"hostname {shlex.quote(pod['spec'].get('hostname') or pod['metadata']['name'])}"]
    for src, dest in mounts:
        top = None
        for parent in [Path(dest), *Path(dest).parents]:
            if parent.exists():
                break
            top = parent
        if top is not None:
            Path(dest).mkdir(parents=True, exist_ok=True)
            made_dirs.append(top)
        q = shlex.quote(dest)
        lines.append(f"mount --bind {shlex.quote(str(src))} {q}")
    lines.append(f"cd {shlex.quote(workdir)}")
    # tell the kubelet the mounts are in place (the container is "started"); the container
    # itself does not inherit that pipe
    lines.append(f"echo started >&{started_fd}")
    lines.append(f'exec "$@" {started_fd}>&-')
    return " && ".join(lines)


def start(
    pod: dict[str, Any],
    netns: str,
    ip: str,
    mounts: list[tuple[Path, str]],
    secrets: dict[str, dict[str, str]],
    bin_dir: Path | None,
    log: Path,
    made_dirs: list[Path],
) -> PodProcess:
    """Start the pod's first container; ``mounts`` are ``(host dir, mountPath)`` binds.

    A missing mountPath is created on the host (a mount point must exist); its topmost new
    folder is appended to ``made_dirs`` for the emulator to remove when it stops.
    """
    container = pod["spec"]["containers"][0]
    env = container_env(pod, container, secrets)
    path = SYSTEM_PATH if bin_dir is None else f"{bin_dir}:{SYSTEM_PATH}"
    full_env = {"PATH": path, "HOSTNAME": pod["metadata"]["name"], "HOME": "/root", **env}
    words = (container.get("command") or []) + (container.get("args") or [])
    argv = [expand(a, env) for a in words]
    if not argv:
        raise ValueError("the emulator needs an explicit command (images are not run)")
    workdir = container.get("workingDir") or "/"
    namespaces = [IP, "netns", "exec", netns, "unshare", "-m", "-u", "--propagation", "private"]
    log.parent.mkdir(parents=True, exist_ok=True)
    started_r, started_w = os.pipe()
    script = _setup_script(pod, mounts, workdir, made_dirs, started_w)
    try:
        proc = subprocess.Popen(  # bash: it closes an fd above 9 (dash does not)
            [*namespaces, "--", "/bin/bash", "-c", script, "k8semu-pod", *argv],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
            pass_fds=(started_w,),
        )
    finally:
        os.close(started_w)
    try:
        # Running only once the bind mounts are made: an exec before that would write into the
        # host's folder under the mountPath (a real kubelet reports Running after the mounts)
        ready, _, _ = select.select([started_r], [], [], START_TIMEOUT_S)
        if ready:
            os.read(started_r, 64)  # b"" if the setup failed and the process exited
    finally:
        os.close(started_r)
    pp = PodProcess(netns, ip, log, proc, full_env, workdir)
    pp.pump = threading.Thread(target=pp._pump, daemon=True)
    pp.pump.start()
    return pp


def exec_argv(pp: PodProcess, command: list[str]) -> list[str]:
    """The argv that runs ``command`` inside the pod's mount, network and UTS namespaces."""
    return ["nsenter", "-t", str(pp.pid), "-m", "-n", "-u", f"--wd={pp.workdir}", "--", *command]
