"""`tcl repl` and `tcl sync` on an SSH host whose jobs run in docker containers: Jupyter in the
container, reached through the SSH tunnel and the runner's forward; a cut SSH connection is
reconnected by the next connection through the forward."""

from __future__ import annotations

import json
from typing import Any

from tests.integration.control.sshlab import Env, kill_connections
from tests.integration.control.test_e2e_ssh import e2e
from tests.integration.control.test_repl_local import add_files, edit_every_kind, shipped
from tests.integration.replcli import start_repl
from tests.testbed import SshTestbed

__all__ = ["e2e"]  # the module's fixture: sshd hosts with shims, a repo

# Run inside the container: every file of the Jupyter's working dir, sha256 and exec bit.
_TREE = """
import hashlib, json, os, stat
pid = next(p for p in os.listdir("/proc") if p.isdigit()
           and b"jupyterlab" in open(f"/proc/{p}/cmdline", "rb").read())
root = os.readlink(f"/proc/{pid}/cwd")
out = {}
for d, dirs, files in os.walk(root):
    dirs[:] = [x for x in dirs if x != ".ipynb_checkpoints"]
    for f in files:
        p = os.path.join(d, f)
        st = os.lstat(p)
        if stat.S_ISREG(st.st_mode):
            out[os.path.relpath(p, root)] = [hashlib.sha256(open(p, "rb").read()).hexdigest(),
                                             bool(st.st_mode & stat.S_IXUSR)]
print(json.dumps(out))
"""


def _remote_tree(docker_client: Any, run_id: str) -> dict[str, tuple[str, bool]]:
    (c,) = [
        c
        for c in docker_client.containers.list(filters={"label": "tcl.shim.task-id"})
        if c.labels["tcl.shim.task-id"].startswith(run_id)
    ]
    code, out = c.exec_run(["python3", "-c", _TREE])
    assert code == 0, out
    return {k: (v[0], v[1]) for k, v in json.loads(out).items()}


def test_repl_in_a_container_through_a_cut_connection_and_sync(
    e2e: Env, ssh_testbed: SshTestbed, docker_client: Any
) -> None:
    add_files(e2e.repo)  # committed
    repl = start_repl(e2e, "--host", "gpu-h100")
    try:
        status, body = repl.get("/api/status")
        assert status == 200 and "started" in body, body
        run_id = next(r["run_id"] for r in e2e.tcl_json("ps") if r["host"] == "gpu-h100")
        assert _remote_tree(docker_client, run_id) == shipped(e2e.repo)

        assert kill_connections(ssh_testbed) > 0  # the tunnel under the forward is gone
        status, body = repl.get("/api/status")
        assert status == 200 and "started" in body, body  # a new connection reconnected it

        edit_every_kind(e2e.repo)
        res = e2e.tcl_json("sync", run_id)
        assert res["paths"] == 7, res
        assert _remote_tree(docker_client, run_id) == shipped(e2e.repo)  # byte for byte

        code, err = repl.interrupt()
        assert code == 0 and f"left running: tcl repl --attach {run_id}" in err, err
        assert "terminated" in e2e.tcl("stop", "--grace", "1", run_id).stderr
    finally:
        if repl.proc.poll() is None:
            repl.proc.kill()
