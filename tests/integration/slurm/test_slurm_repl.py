"""`tcl repl` on the SLURM testbed: Jupyter in the batch job, reached through the login node
(node 0's runner serves its API; the pool's SSH connection forwards to the node's address),
`tcl sync` into it, and a session still waiting in SLURM's queue cancelled by Ctrl-C with no
job left behind (issue 32)."""

from __future__ import annotations

import signal

import pytest

from tests.integration.replcli import start_repl
from tests.integration.slurm.test_e2e_slurm import Env, e2e
from tests.integration.tclcli import start_tcl
from tests.polling import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slurm]
__all__ = ["e2e"]  # the module's fixture: the SLURM testbed, a config, a repo


def test_repl_through_the_login_node_and_sync(e2e: Env) -> None:
    repl = start_repl(e2e, "--host", "hpc", "--chip", "h100", "-n", "1")
    try:
        status, body = repl.get("/api/status")
        assert status == 200 and "started" in body, body
        run_id = next(r["run_id"] for r in e2e.tcl_json("ps") if r["session"] == "jupyter")
        assert any(f"tcl-{run_id}" in line for line in e2e.squeue())
        (e2e.repo / "hello.py").write_text("print('synced to the compute node')\n")
        assert e2e.tcl_json("sync", run_id)["paths"] == 1
        status, body = repl.get("/api/contents/hello.py?content=1")  # Jupyter reads the file
        assert status == 200 and body["content"] == "print('synced to the compute node')\n"
        code, err = repl.interrupt()
        assert code == 0 and f"left running: tcl repl --attach {run_id}" in err, err
        assert "terminated" in e2e.tcl("stop", run_id).stderr
        wait_until(  # scancelled: it goes once SLURM is done with it (COMPLETING meanwhile)
            lambda: not any(f"tcl-{run_id}" in line for line in e2e.squeue()),
            60,
            "its job gone from squeue",
        )
    finally:
        if repl.proc.poll() is None:
            repl.proc.kill()


def test_a_queued_repl_is_cancelled_by_ctrl_c_and_leaves_no_job(e2e: Env) -> None:
    c = e2e.cluster
    hold = c.ssh("sbatch --parsable -p gpu -N 2 --gres=gpu:h100:4 --wrap 'sleep 300'")
    holder = hold.stdout.strip()
    assert holder.isdigit(), hold.stderr
    argv = ["repl", "--no-browser", "--host", "hpc", "--chip", "h100", "-n", "4"]
    proc = start_tcl(argv, e2e.env(), e2e.repo)
    try:
        (run,) = wait_until(
            lambda: [r for r in e2e.tcl_json("ps") if r["session"] == "jupyter"],
            120,
            "the session queued",
            done=lambda runs: len(runs) == 1 and runs[0]["state"] == "queued",
        )
        wait_until(
            lambda: any(f"tcl-{run['run_id']}" in line for line in e2e.squeue()),
            60,
            "its job in squeue",
        )
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 130 and "cancelled while it waited" in err, err
        wait_until(
            lambda: not any(f"tcl-{run['run_id']}" in line for line in e2e.squeue()),
            60,
            "its queued job gone from squeue",
        )
    finally:
        if proc.poll() is None:
            proc.kill()
        c.ssh(f"scancel {holder}")
