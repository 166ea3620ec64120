"""`@tcl.remote` on an SSH host: the write-back oracle (the same notebook cells run locally and
through a real `remote` session run on ``gpu-a100``, the process host in its network namespace,
reached through a jump host) leaves the notebook as the local call does (issue 30)."""

from __future__ import annotations

import pytest

from tests.integration.control.sshlab import Env
from tests.integration.control.test_e2e_ssh import e2e
from tests.integration.remote.test_writeback_oracle import assert_same, oracle_through_tcl

__all__ = ["e2e"]  # the module's fixture: sshd hosts with shims, a repo


@pytest.mark.timeout(300)
def test_a_call_through_a_run_on_an_ssh_host_changes_the_notebook_as_a_local_call(
    e2e: Env,
) -> None:
    expected, got = oracle_through_tcl(e2e.env(), e2e.repo, chip="a100")
    assert_same(expected, got)
