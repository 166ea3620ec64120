"""Control end-to-end tests use the sshd hosts of ``tests.testbed`` (fixture ``ssh_testbed``)."""

from __future__ import annotations

from tests.testbed import SshTestbed

__all__ = ["SshTestbed"]
