"""The SSH transport's cipher choice: AES-GCM first, unless the host's ssh config names its own
``Ciphers`` (asyncssh then uses those, as OpenSSH's ssh would). Checked through asyncssh's own
option resolution, the one a connection uses."""

from __future__ import annotations

from pathlib import Path

import asyncssh
import pytest

from tcl.control.transport.ssh import PREFERRED_CIPHERS, SshTarget


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty home: no ~/.ssh/config, no keys, no agent."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return home


def _negotiable(target: SshTarget) -> list[str]:
    """The ciphers asyncssh would offer for ``target``, in order (its options built as
    ``asyncssh.connect`` builds them: no ``config`` given means ``~/.ssh/config``)."""
    opts = target.options()
    config = opts.pop("config", ())
    options = asyncssh.SSHClientConnectionOptions(host=target.host, config=config, **opts)
    return [alg.decode() for alg in options.encryption_algs]


def test_without_a_config_aes_gcm_comes_first() -> None:
    offered = _negotiable(SshTarget(name="h", host="gpu-1"))
    assert offered == list(PREFERRED_CIPHERS)
    assert offered[0] == "aes128-gcm@openssh.com"


def test_a_config_that_names_ciphers_for_the_host_is_followed(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host fips-*\n  Ciphers aes256-ctr,aes128-ctr\nHost *\n  Port 22\n")
    fips = SshTarget(name="f", host="fips-1", config_file=str(config))
    assert _negotiable(fips) == ["aes256-ctr", "aes128-ctr"]
    other = SshTarget(name="o", host="gpu-1", config_file=str(config))
    assert _negotiable(other)[0] == "aes128-gcm@openssh.com"


def test_the_users_own_ssh_config_counts_too(_home: Path) -> None:
    (_home / ".ssh" / "config").write_text("Host *\n  Ciphers chacha20-poly1305@openssh.com\n")
    offered = _negotiable(SshTarget(name="h", host="gpu-1", user="me", port=2222))
    assert offered == ["chacha20-poly1305@openssh.com"]


def test_an_unreadable_config_leaves_the_error_to_asyncssh(tmp_path: Path) -> None:
    """A config that cannot be read adds nothing: the connection reports it (its own error)."""
    missing = SshTarget(name="m", host="gpu-1", config_file=str(tmp_path / "absent"))
    assert missing.options()["encryption_algs"] == list(PREFERRED_CIPHERS)
