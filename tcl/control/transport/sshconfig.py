"""``tcl ssh``: tcl's own key pair and an ssh config file the user can ``Include``.

Each run with a container sshd gets a ``Host <run-id>`` entry whose endpoint is the container
sshd on the host's loopback, reached with the host as ``ProxyJump``; so ``ssh RUN`` and VS Code
Remote-SSH work once ``Include ~/.local/share/tcl/ssh/config`` is in ``~/.ssh/config``.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

from tcl.atomic import fsync_dir, write_atomic
from tcl.control.backends.base import SshEndpoint
from tcl.control.errors import ConfigError
from tcl.control.paths import ssh_dir

KEY_NAME = "id_ed25519"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def key_path() -> Path:
    """tcl's private key for container sshds (made on first use, mode 0600).

    Concurrent first uses (parallel ``tcl submit``) each generate a key into a unique temporary
    file and hard-link it into place: ``os.link`` never replaces, so the first writer wins and
    every caller ends with that one key."""
    path = ssh_dir() / KEY_NAME
    if not path.exists():
        import asyncssh

        key = asyncssh.generate_private_key("ssh-ed25519", comment="tcl")
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{KEY_NAME}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:  # mkstemp made it 0600
                f.write(key.export_private_key())
                f.flush()
                os.fsync(f.fileno())
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            os.unlink(tmp)
        fsync_dir(path.parent)
    return path


def public_key() -> str:
    """The public half of ``key_path()``, derived from the private key that won (so it always
    matches, whoever generated it)."""
    private = key_path()
    pub = private.with_name(f"{KEY_NAME}.pub")
    if not pub.exists():
        import asyncssh

        text = asyncssh.read_private_key(private).export_public_key().decode()
        write_atomic(pub, text)  # 0600, as all state; every writer writes the same text
    return pub.read_text().strip()


def config_path() -> Path:
    return ssh_dir() / "config"


def _value(name: str, value: object) -> str:
    """A value as the ssh config reads it (quoted when it has spaces); one that would end the
    line or its quotes is refused (endpoints come from the config, checked at load, and from
    cloud APIs)."""
    text = str(value)
    if _CONTROL.search(text) or '"' in text:
        raise ConfigError(
            f"ssh config {name} {text!r}: a control character or a double quote would change "
            "the ssh config tcl writes"
        )
    return f'"{text}"' if any(c.isspace() for c in text) else text


def _opt(name: str, value: object) -> str:
    return f"  {name} {_value(name, value)}\n"


def _host(name: str) -> str:
    if not name or _CONTROL.search(name) or any(c.isspace() for c in name) or '"' in name:
        raise ConfigError(f"ssh config Host {name!r}: not one word (a control character?)")
    return f"\nHost {name}\n"


def render(entries: dict[str, tuple[str, SshEndpoint]], include: list[str]) -> str:
    """``entries``: run id → (host name, endpoint). ``include``: ssh configs for the jump hosts."""
    out = ["# Written by tcl; Include it from ~/.ssh/config. Regenerated on every submit/ssh.\n"]
    jumps: dict[str, SshEndpoint] = {}
    for run_id, (host, ep) in sorted(entries.items()):
        jump = f"tcl-host-{host}"
        jumps[jump] = ep
        out.append(_host(run_id))
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
        out.append(_host(jump))
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
        out.extend(f"Include {_value('Include', os.path.expanduser(p))}\n" for p in include)
    return "".join(out)


def write(entries: dict[str, tuple[str, SshEndpoint]], include: list[str]) -> Path:
    path = config_path()
    write_atomic(path, render(entries, include))  # 0600: ssh reads it as its owner
    return path
