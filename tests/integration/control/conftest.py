"""Fixtures for control end-to-end tests: real sshd hosts (scripts/testbed/ssh-up.sh).

ssh-up.sh makes key-only sshd "hosts" in network namespaces ``infra-h1..N`` (10.213.0.11..)
on bridge ``br-infra``, plus one on 127.0.0.1:2222 in the root namespace; ssh-down.sh removes
them all. Only the control tests use these names.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.testbed import run_script

BASE = "/tmp/tcl-testbed-control"


@dataclass(frozen=True)
class SshTestbed:
    dir: Path  # keys, known_hosts, ssh_config, sshd pid files

    @property
    def key(self) -> str:
        return str(self.dir / "id_ed25519")

    @property
    def known_hosts(self) -> str:
        return str(self.dir / "known_hosts")

    @property
    def config(self) -> str:
        return str(self.dir / "ssh_config")

    def pid(self, name: str) -> int:
        return int((self.dir / f"sshd_{name}.pid").read_text().split()[0])


@pytest.fixture(scope="session")
def ssh_testbed() -> Iterator[SshTestbed]:
    env = {"BASE": BASE, "N": "2"}
    run_script("ssh-down.sh", env)  # leftovers of an interrupted run
    run_script("ssh-up.sh", env)
    try:
        yield SshTestbed(Path(BASE) / "ssh")
    finally:
        run_script("ssh-down.sh", env)
