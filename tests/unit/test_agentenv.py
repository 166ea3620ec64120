"""What each local agent inherits of the user's environment: tcl's settings, never the rest."""

from __future__ import annotations

from tcl.agentenv import daemon_env, job_base_env, submitter_env


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


def test_a_submit_carries_its_shell_s_base_and_nothing_else() -> None:
    shell = {
        "PATH": "/home/u/.venv/bin:/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "HOME": "/home/u",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t",
        "TCL_CONFIG": "/home/u/tcl.yaml",
        "COVERAGE_PROCESS_START": "x",
        "http_proxy": "http://proxy:3128",
    }
    assert submitter_env(shell) == {
        "PATH": "/home/u/.venv/bin:/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C",
        "HOME": "/home/u",
    }
