"""What each local agent inherits of the user's environment: tcl's settings, never the rest."""

from __future__ import annotations

from tcl.agentenv import daemon_env, job_base_env


def test_the_daemon_an_add_starts_keeps_the_scheduler_name_and_drops_secrets() -> None:
    user = {
        "PATH": "/usr/bin",
        "TCL_SCHEDULER_NAME": "pod-0",  # `matrix add` starts the daemon: its claims say pod-0
        "TCL_SERVE_LEASE_S": "3",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "WANDB_API_KEY": "k",
    }
    env = daemon_env(user)
    assert env["TCL_SCHEDULER_NAME"] == "pod-0" and env["TCL_SERVE_LEASE_S"] == "3"
    assert "AWS_SECRET_ACCESS_KEY" not in env and "WANDB_API_KEY" not in env
    assert "TCL_SCHEDULER_NAME" not in job_base_env(user)  # a job has no use for it
