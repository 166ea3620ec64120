"""`--cluster` / `--avoid-cluster` and the config's `avoid`, through the real `tcl` (issue 32):
the local default's host in one cluster, an unreachable SSH host in another."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.integration.tclcli import run_tcl, stop_local_shim_and_tasks, user_env


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "config.yaml"
    config.write_text(f"""
clusters: {{home: {{}}, far: {{}}}}
hosts:
  here: {{type: local, cluster: home}}
  gone: {{type: ssh, ssh: 127.0.0.1, port: {_closed_port()}, cluster: far, connect_timeout_s: 2}}
priority: [gone, here]
""")
    (tmp_path / "work").mkdir()
    return user_env(tmp_path, config)


def test_cluster_flags_choose_and_name_clusters(env: dict[str, str], tmp_path: Path) -> None:
    work = tmp_path / "work"
    try:
        res = run_tcl(["submit", "--cluster", "home", "--", "python3", "-c", "print(7)"], env, work)
        assert res.stdout == "7\n", res.stderr
        assert "gone: cluster far, not home (--cluster)" in res.stderr, res.stderr

        res = run_tcl(["submit", "--avoid-cluster", "home", "--", "true"], env, work, check=False)
        assert res.returncode != 0
        assert "here: cluster home avoided (--avoid-cluster)" in res.stderr, res.stderr

        res = run_tcl(["submit", "--cluster", "nope", "--", "true"], env, work, check=False)
        assert res.returncode != 0
        assert "--cluster nope: no such cluster (clusters: far, home)" in res.stderr, res.stderr
    finally:
        stop_local_shim_and_tasks(tmp_path / "state" / "local-shim")
