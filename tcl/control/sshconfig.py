"""``tcl ssh``: tcl's own key pair and an ssh config file the user can ``Include``.

Each run with a container sshd gets a ``Host <run-id>`` entry whose endpoint is the container
sshd on the host's loopback, reached with the host as ``ProxyJump``; so ``ssh RUN`` and VS Code
Remote-SSH work once ``Include ~/.local/share/tcl/ssh/config`` is in ``~/.ssh/config``.
"""

from __future__ import annotations

import os
from pathlib import Path

from tcl.control.backends.base import SshEndpoint
from tcl.control.paths import ssh_dir

KEY_NAME = "id_ed25519"


def key_path() -> Path:
    """tcl's private key for container sshds (made on first use, mode 0600)."""
    path = ssh_dir() / KEY_NAME
    if not path.exists():
        import asyncssh

        key = asyncssh.generate_private_key("ssh-ed25519", comment="tcl")
        tmp = path.with_name(f".{KEY_NAME}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key.export_private_key())
            f.flush()
            os.fsync(f.fileno())
        pub = key.export_public_key().decode()
        path.with_name(f"{KEY_NAME}.pub").write_text(pub)
        os.replace(tmp, path)
    return path


def public_key() -> str:
    key_path()
    return (ssh_dir() / f"{KEY_NAME}.pub").read_text().strip()


def config_path() -> Path:
    return ssh_dir() / "config"


def _opt(name: str, value: object) -> str:
    text = str(value)
    if any(c.isspace() for c in text):
        text = f'"{text}"'
    return f"  {name} {text}\n"


def render(entries: dict[str, tuple[str, SshEndpoint]], include: list[str]) -> str:
    """``entries``: run id → (host name, endpoint). ``include``: ssh configs for the jump hosts."""
    out = ["# Written by tcl; Include it from ~/.ssh/config. Regenerated on every submit/ssh.\n"]
    jumps: dict[str, SshEndpoint] = {}
    for run_id, (host, ep) in sorted(entries.items()):
        jump = f"tcl-host-{host}"
        jumps[jump] = ep
        out.append(f"\nHost {run_id}\n")
        out.append(_opt("HostName", "127.0.0.1"))
        out.append(_opt("Port", ep.container_port))
        out.append(_opt("User", "root"))
        out.append(_opt("IdentityFile", key_path()))
        out.append(_opt("IdentitiesOnly", "yes"))
        out.append(_opt("ProxyJump", jump))
        # the container's host key is new for every run and only reachable through the host
        out.append(_opt("StrictHostKeyChecking", "no"))
        out.append(_opt("UserKnownHostsFile", "/dev/null"))
        out.append(_opt("LogLevel", "ERROR"))
    for jump, ep in sorted(jumps.items()):
        out.append(f"\nHost {jump}\n")
        out.append(_opt("HostName", ep.host))
        if ep.port is not None:
            out.append(_opt("Port", ep.port))
        if ep.user is not None:
            out.append(_opt("User", ep.user))
        if ep.identity_file is not None:
            out.append(_opt("IdentityFile", os.path.expanduser(ep.identity_file)))
        if ep.known_hosts is not None:
            out.append(_opt("UserKnownHostsFile", os.path.expanduser(ep.known_hosts)))
        if ep.proxy_jump:
            out.append(_opt("ProxyJump", ep.proxy_jump))
    if include:
        out.append("\nMatch all\n")
        out.extend(f"Include {os.path.expanduser(p)}\n" for p in include)
    return "".join(out)


def write(entries: dict[str, tuple[str, SshEndpoint]], include: list[str]) -> Path:
    path = config_path()
    tmp = path.with_name(".config.tmp")
    tmp.write_text(render(entries, include))
    os.replace(tmp, path)
    return path
