"""tcl's ssh key pair: concurrent first uses all end with one key and its matching .pub."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import asyncssh
import pytest

from tcl.control.transport import sshconfig


def _first_use(_: int) -> tuple[str, str]:
    return str(sshconfig.key_path()), sshconfig.public_key()


def test_parallel_first_uses_share_one_key_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TCL_STATE_DIR", str(tmp_path))
    # spawned, not forked: a fork of this worker (its other tests' threads: JAX's, the
    # store's) can copy a lock some thread holds, and the child then waits on it forever
    # (seen once in CI: the pool never returned)
    pool = multiprocessing.get_context("spawn").Pool(8)
    try:
        results = pool.map(_first_use, range(16))
    finally:
        # the workers end on their own, never by SIGTERM (what the context manager's
        # terminate() sends): under `coverage run` (sigterm = true) a worker saves its data in
        # its SIGTERM handler, and one interrupted while it held a lock that save needs waits
        # forever, and the pool with it (CI18: a worker stuck in a futex, the test at its
        # timeout)
        pool.close()
        pool.join()
    assert len(set(results)) == 1
    ((private, pub),) = set(results)
    assert asyncssh.read_private_key(private).export_public_key().decode().strip() == pub
    assert Path(private).stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in Path(private).parent.iterdir()) == [
        "id_ed25519",
        "id_ed25519.pub",
    ]  # no temporary file left behind
